package snapshotapi

import (
	"math"
	"math/big"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// A watched list applies its filters to each changed document here, in memory, as MongoDB
// applies the same conditions to the list's find (condition.filter): a field path reaches
// into embedded documents and through one level of arrays of them; a condition holds when
// the field's value, or any element of an array value, satisfies it; $ne holds when $eq does
// not (a missing field included); range operators compare only within a type bracket
// (numbers by value across int32, int64, double and decimal; strings binary; booleans false
// before true; dates by instant); NaN equals only NaN and is outside every range. A time
// condition matches a date by its instant and a string as the string it compares with.
// TestWatchFilterAgreesWithFind checks this against the deployment's own find.

// matchAll reports whether doc satisfies every condition.
func matchAll(doc bsoncore.Document, conds []condition) bool {
	for i := range conds {
		if !conds[i].matches(doc) {
			return false
		}
	}
	return true
}

func (c *condition) matches(doc bsoncore.Document) bool {
	vals := pathValues(doc, c.field)
	switch c.op {
	case "ne":
		return !anyCandidate(vals, func(v bsoncore.Value) bool { return c.equal(v) })
	case "eq", "in":
		return anyCandidate(vals, func(v bsoncore.Value) bool { return c.equal(v) })
	case "prefix":
		p := c.values[0].(string)
		return anyCandidate(vals, func(v bsoncore.Value) bool {
			s, ok := stringOf(v)
			return ok && strings.HasPrefix(s, p)
		})
	}
	return anyCandidate(vals, func(v bsoncore.Value) bool { return c.inRange(v) })
}

// anyCandidate reports whether f holds for a value or, for an array, for it or one of its
// elements.
func anyCandidate(vals []bsoncore.Value, f func(bsoncore.Value) bool) bool {
	for _, v := range vals {
		if f(v) {
			return true
		}
		if a, ok := v.ArrayOK(); ok {
			rem, ok := docElements(a)
			for ok {
				var el bsoncore.Element
				if el, rem, ok = bsoncore.ReadElement(rem); !ok {
					break
				}
				if f(el.Value()) {
					return true
				}
			}
		}
	}
	return false
}

// pathValues returns the values a dotted path reaches: through embedded documents, and
// through the documents of an array on the way.
func pathValues(doc bsoncore.Document, path string) []bsoncore.Value {
	head, rest, dotted := strings.Cut(path, ".")
	v, err := doc.LookupErr(head)
	if err != nil {
		return nil
	}
	if !dotted {
		return []bsoncore.Value{v}
	}
	switch v.Type {
	case bsoncore.TypeEmbeddedDocument:
		return pathValues(v.Document(), rest)
	case bsoncore.TypeArray:
		var out []bsoncore.Value
		rem, ok := docElements(v.Array())
		for ok {
			var el bsoncore.Element
			if el, rem, ok = bsoncore.ReadElement(rem); !ok {
				break
			}
			if d, isDoc := el.Value().DocumentOK(); isDoc {
				out = append(out, pathValues(d, rest)...)
			}
		}
		return out
	}
	return nil
}

func stringOf(v bsoncore.Value) (string, bool) {
	switch v.Type {
	case bsoncore.TypeString:
		return v.StringValueOK()
	case bsoncore.TypeSymbol:
		return v.SymbolOK()
	}
	return "", false
}

// equal reports whether v equals one of the condition's values.
func (c *condition) equal(v bsoncore.Value) bool {
	for _, want := range c.values {
		if cmp, ok := compareTo(v, want); ok && cmp == 0 {
			return true
		}
	}
	return false
}

// inRange reports whether v satisfies the condition's range operator.
func (c *condition) inRange(v bsoncore.Value) bool {
	cmp, ok := compareTo(v, c.values[0])
	if !ok {
		return false
	}
	switch c.op {
	case "gt":
		return cmp > 0
	case "gte":
		return cmp >= 0
	case "lt":
		return cmp < 0
	case "lte":
		return cmp <= 0
	}
	return false
}

// compareTo compares a document's value with a filter value (string, int64, float64, bool
// or timeValue); ok is false when they are in different brackets, or either is NaN
// (which equals only NaN: compareTo reports 0 then).
func compareTo(v bsoncore.Value, want any) (int, bool) {
	switch w := want.(type) {
	case string:
		s, ok := stringOf(v)
		if !ok {
			return 0, false
		}
		return strings.Compare(s, w), true
	case bool:
		b, ok := v.BooleanOK()
		if !ok {
			return 0, false
		}
		switch {
		case b == w:
			return 0, true
		case w:
			return -1, true
		}
		return 1, true
	case timeValue:
		if ms, ok := v.DateTimeOK(); ok {
			wm := int64(bson.NewDateTimeFromTime(w.t))
			switch {
			case ms < wm:
				return -1, true
			case ms > wm:
				return 1, true
			}
			return 0, true
		}
		if s, ok := stringOf(v); ok {
			return strings.Compare(s, w.s), true
		}
		return 0, false
	case int64:
		return compareNumber(v, new(big.Float).SetInt64(w))
	case float64:
		return compareNumber(v, new(big.Float).SetFloat64(w))
	}
	return 0, false
}

// compareNumber compares a numeric BSON value with w exactly.
func compareNumber(v bsoncore.Value, w *big.Float) (int, bool) {
	var f *big.Float
	switch v.Type {
	case bsoncore.TypeInt32:
		f = new(big.Float).SetInt64(int64(v.Int32()))
	case bsoncore.TypeInt64:
		f = new(big.Float).SetInt64(v.Int64())
	case bsoncore.TypeDouble:
		d := v.Double()
		if math.IsNaN(d) {
			return 0, false
		}
		f = new(big.Float).SetFloat64(d)
	case bsoncore.TypeDecimal128:
		h, l := v.Decimal128()
		d := bson.NewDecimal128(h, l)
		if b, exp, err := d.BigInt(); err == nil {
			f = new(big.Float).SetInt(b)
			if exp != 0 {
				scale := new(big.Float).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil))
				if exp > 0 {
					f.Mul(f, scale)
				} else {
					f.Quo(f, scale)
				}
			}
		} else {
			switch d.String() {
			case "Infinity":
				f = new(big.Float).SetInf(false)
			case "-Infinity":
				f = new(big.Float).SetInf(true)
			default: // NaN
				return 0, false
			}
		}
	default:
		return 0, false
	}
	return f.Cmp(w), true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// related reports whether a changed path (as a change stream names it: dotted, array
// indexes as numbers) may change the value of field: one is the other or contains it.
func related(changed, field string) bool {
	for _, p := range []string{changed, withoutIndexes(changed)} {
		if p == field || strings.HasPrefix(field, p+".") || strings.HasPrefix(p, field+".") {
			return true
		}
	}
	return false
}

// withoutIndexes drops the array indexes of a changed path: "customer.0.id" → "customer.id".
func withoutIndexes(p string) string {
	if !strings.ContainsAny(p, "0123456789") {
		return p
	}
	parts := strings.Split(p, ".")
	out := parts[:0]
	for _, s := range parts {
		if !isIndex(s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, ".")
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
