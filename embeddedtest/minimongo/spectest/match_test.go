package spectest

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// missing stands for an absent value (a field not in the actual document, a result field
// the driver does not report).
type missingT struct{}

var missing = missingT{}

// lookup returns a document's field.
func lookup(d bson.D, k string) (any, bool) {
	for _, e := range d {
		if e.Key == k {
			return e.Value, true
		}
	}
	return nil, false
}

func str(d bson.D, k string) string {
	v, _ := lookup(d, k)
	s, _ := v.(string)
	return s
}

func doc(d bson.D, k string) bson.D {
	v, _ := lookup(d, k)
	x, _ := v.(bson.D)
	return x
}

func arr(d bson.D, k string) bson.A {
	v, _ := lookup(d, k)
	x, _ := v.(bson.A)
	return x
}

// operator returns the $$ operator an expected value is, if it is one.
func operator(v any) (string, any, bool) {
	d, ok := v.(bson.D)
	if ok && len(d) == 1 && strings.HasPrefix(d[0].Key, "$$") {
		return d[0].Key, d[0].Value, true
	}
	return "", nil, false
}

// normalize turns any driver value into the generic BSON form matching works on
// (bson.D, bson.A and primitives).
func normalize(v any) any {
	switch x := v.(type) {
	case nil, missingT, bson.D, bson.A, string, bool, int32, int64, float64:
		if d, ok := x.(bson.D); ok {
			out := make(bson.D, len(d))
			for i, e := range d {
				out[i] = bson.E{Key: e.Key, Value: normalize(e.Value)}
			}
			return out
		}
		if a, ok := x.(bson.A); ok {
			out := make(bson.A, len(a))
			for i, e := range a {
				out[i] = normalize(e)
			}
			return out
		}
		return v
	case int:
		return int64(x)
	case bson.Raw:
		var d bson.D
		if err := bson.Unmarshal(x, &d); err != nil {
			return x
		}
		return normalize(d)
	}
	b, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return v
	}
	var d bson.D
	if err := bson.Unmarshal(b, &d); err != nil {
		return v
	}
	switch d[0].Value.(type) {
	case bson.D, bson.A:
		return normalize(d[0].Value)
	}
	return d[0].Value
}

// matcher evaluates expected values against actual ones with the unified format's rules.
type matcher struct {
	ents *entities
}

func (m *matcher) match(exp, act any, root bool, path string) error {
	if op, arg, ok := operator(exp); ok {
		return m.special(op, arg, act, root, path)
	}
	switch e := exp.(type) {
	case bson.D:
		a, ok := act.(bson.D)
		if !ok {
			return fmt.Errorf("%s: want a document, got %s", path, show(act))
		}
		for _, el := range e {
			av, present := lookup(a, el.Key)
			if op, arg, ok := operator(el.Value); ok {
				switch op {
				case "$$exists":
					want, _ := arg.(bool)
					if want != present {
						return fmt.Errorf("%s.%s: $$exists %v, got %s", path, el.Key, want, show(av))
					}
					continue
				case "$$unsetOrMatches":
					if !present {
						continue
					}
				}
			}
			if !present {
				av = missing
			}
			if err := m.match(el.Value, av, false, path+"."+el.Key); err != nil {
				return err
			}
		}
		if !root {
			for _, el := range a {
				if _, ok := lookup(e, el.Key); !ok {
					return fmt.Errorf("%s: unexpected field %s in %s", path, el.Key, show(a))
				}
			}
		}
		return nil
	case bson.A:
		a, ok := act.(bson.A)
		if !ok {
			return fmt.Errorf("%s: want an array, got %s", path, show(act))
		}
		if len(a) != len(e) {
			return fmt.Errorf("%s: want %d elements, got %d: %s", path, len(e), len(a), show(a))
		}
		for i := range e {
			if err := m.match(e[i], a[i], false, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if _, ok := act.(missingT); ok {
		return fmt.Errorf("%s: want %s, missing", path, show(exp))
	}
	if x, ok := number(exp); ok {
		y, ok2 := number(act)
		if !ok2 || x != y {
			return fmt.Errorf("%s: want %s, got %s", path, show(exp), show(act))
		}
		return nil
	}
	if !equalValue(exp, act) {
		return fmt.Errorf("%s: want %s, got %s", path, show(exp), show(act))
	}
	return nil
}

func (m *matcher) special(op string, arg, act any, root bool, path string) error {
	switch op {
	case "$$exists":
		want, _ := arg.(bool)
		if _, isMissing := act.(missingT); isMissing == want {
			return fmt.Errorf("%s: $$exists %v", path, want)
		}
		return nil
	case "$$unsetOrMatches":
		if _, ok := act.(missingT); ok {
			return nil
		}
		return m.match(arg, act, root, path)
	case "$$type":
		types := []string{}
		switch t := arg.(type) {
		case string:
			types = append(types, t)
		case bson.A:
			for _, x := range t {
				s, _ := x.(string)
				types = append(types, s)
			}
		}
		got := typeName(act)
		for _, t := range types {
			if t == got || (t == "number" && (got == "int" || got == "long" || got == "double" || got == "decimal")) {
				return nil
			}
		}
		return fmt.Errorf("%s: want $$type %v, got %s (%s)", path, types, got, show(act))
	case "$$matchesEntity":
		id, _ := arg.(string)
		v, ok := m.ents.values[id]
		if !ok {
			return fmt.Errorf("%s: no entity %q", path, id)
		}
		return m.match(normalize(v), act, root, path)
	case "$$matchesHexBytes":
		s, _ := arg.(string)
		want, err := hex.DecodeString(s)
		if err != nil {
			return fmt.Errorf("%s: malformed $$matchesHexBytes %q", path, s)
		}
		var got []byte
		switch a := act.(type) {
		case string:
			got = []byte(a)
		case bson.Binary:
			got = a.Data
		}
		if !bytes.Equal(want, got) {
			return fmt.Errorf("%s: want bytes %x, got %s", path, want, show(act))
		}
		return nil
	case "$$sessionLsid":
		id, _ := arg.(string)
		lsid, ok := m.ents.lsids[id]
		if !ok {
			return fmt.Errorf("%s: no session %q", path, id)
		}
		return m.match(lsid, act, false, path)
	case "$$lte":
		x, ok1 := number(arg)
		y, ok2 := number(act)
		if !ok1 || !ok2 || y > x {
			return fmt.Errorf("%s: want <= %s, got %s", path, show(arg), show(act))
		}
		return nil
	case "$$matchAsDocument":
		s, ok := act.(string)
		if !ok {
			return fmt.Errorf("%s: $$matchAsDocument wants a string, got %s", path, show(act))
		}
		var d bson.D
		if err := bson.UnmarshalExtJSON([]byte(s), false, &d); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		return m.match(arg, normalize(d), false, path)
	case "$$matchAsRoot":
		return m.match(arg, act, true, path)
	}
	return fmt.Errorf("%s: unsupported operator %s", path, op)
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		if math.IsNaN(x) {
			return 0, false
		}
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

func equalValue(a, b any) bool {
	ba, err1 := bson.Marshal(bson.D{{Key: "v", Value: a}})
	bb, err2 := bson.Marshal(bson.D{{Key: "v", Value: b}})
	return err1 == nil && err2 == nil && bytes.Equal(ba, bb)
}

// equalExact compares documents exactly, up to key order in documents (outcome data).
func equalExact(a, b any) bool {
	switch x := a.(type) {
	case bson.D:
		y, ok := b.(bson.D)
		if !ok || len(x) != len(y) {
			return false
		}
		for _, e := range x {
			v, ok := lookup(y, e.Key)
			if !ok || !equalExact(e.Value, v) {
				return false
			}
		}
		return true
	case bson.A:
		y, ok := b.(bson.A)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalExact(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return equalValue(a, b)
}

func typeName(v any) string {
	switch v.(type) {
	case float64:
		return "double"
	case string:
		return "string"
	case bson.D:
		return "object"
	case bson.A:
		return "array"
	case bson.Binary:
		return "binData"
	case bson.Undefined:
		return "undefined"
	case bson.ObjectID:
		return "objectId"
	case bool:
		return "bool"
	case bson.DateTime:
		return "date"
	case nil:
		return "null"
	case bson.Regex:
		return "regex"
	case bson.DBPointer:
		return "dbPointer"
	case bson.JavaScript:
		return "javascript"
	case bson.Symbol:
		return "symbol"
	case bson.CodeWithScope:
		return "javascriptWithScope"
	case int32:
		return "int"
	case bson.Timestamp:
		return "timestamp"
	case int64:
		return "long"
	case bson.Decimal128:
		return "decimal"
	case bson.MinKey:
		return "minKey"
	case bson.MaxKey:
		return "maxKey"
	case missingT:
		return "missing"
	}
	return fmt.Sprintf("%T", v)
}

func show(v any) string {
	switch v.(type) {
	case missingT:
		return "(missing)"
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	s := string(b)
	s = strings.TrimSuffix(strings.TrimPrefix(s, `{"v":`), "}")
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}
