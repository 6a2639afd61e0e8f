package minimongo

import (
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// index describes an index. Only unique indexes keep entries: they are the
// ones whose constraint must be enforced; every index can be listed and
// dropped, and TTL indexes drive expiry.
type index struct {
	name        string
	keys        bson.D
	unique      bool
	sparse      bool
	expireAfter *int64
	partial     bson.D
	partialM    matcher
	spec        bson.D
	entries     map[string]string // key string -> document key
}

func idIndex() *index {
	return &index{
		name: "_id_",
		keys: bson.D{{Key: "_id", Value: int32(1)}},
		spec: bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "name", Value: "_id_"}},
	}
}

// parseIndexSpec validates one entry of createIndexes.indexes.
func parseIndexSpec(spec bson.D) (*index, error) {
	ix := &index{}
	var hasKey bool
	for _, e := range spec {
		switch e.Key {
		case "key":
			d, ok := e.Value.(bson.D)
			if !ok || len(d) == 0 {
				return nil, newErr(codeFailedToParse, "The 'key' field must be a non-empty object")
			}
			for _, k := range d {
				if !isNumber(k.Value) {
					if s, ok := k.Value.(string); ok {
						return nil, errUnsupported(fmt.Sprintf("index type '%s' (field '%s')", s, k.Key))
					}
					return nil, newErr(67, "Values in the index key pattern can only be numbers or strings")
				}
				if compareNumbers(k.Value, int32(0)) == 0 {
					return nil, newErr(67, "Values in v:2 index key pattern cannot be of numeric type 0")
				}
			}
			ix.keys = d
			hasKey = true
		case "name":
			s, ok := e.Value.(string)
			if !ok || s == "" {
				return nil, newErr(codeTypeMismatch, "The 'name' field must be a non-empty string")
			}
			ix.name = s
		case "unique":
			ix.unique = truthy(e.Value)
		case "sparse":
			ix.sparse = truthy(e.Value)
		case "expireAfterSeconds":
			n, ok := asInt64(e.Value)
			if !ok || n < 0 {
				return nil, newErr(codeInvalidOptions, "TTL index 'expireAfterSeconds' option must be numeric, but received a type of '%s'", typeName(e.Value))
			}
			ix.expireAfter = &n
		case "partialFilterExpression":
			d, ok := e.Value.(bson.D)
			if !ok {
				return nil, newErr(codeTypeMismatch, "partialFilterExpression must be an object")
			}
			if err := checkPartialFilter(d); err != nil {
				return nil, err
			}
			m, err := compileFilter(d)
			if err != nil {
				return nil, err
			}
			ix.partial, ix.partialM = d, m
		case "v", "background", "ns":
		case "collation":
			if err := checkCollation(e.Value, "createIndexes"); err != nil {
				return nil, err
			}
		default:
			return nil, newErr(codeInvalidIndexSpecOption, "The field '%s' is not valid for an index specification. Specification: %s", e.Key, formatValue(spec))
		}
	}
	if !hasKey {
		return nil, newErr(codeFailedToParse, "The 'key' field is a required property of an index specification")
	}
	if ix.name == "" {
		return nil, newErr(codeFailedToParse, "The 'name' field is a required property of an index specification")
	}
	if ix.expireAfter != nil && len(ix.keys) != 1 {
		return nil, newErr(codeInvalidOptions, "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: %s", formatValue(spec))
	}
	ix.spec = bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: ix.keys}, {Key: "name", Value: ix.name}}
	if ix.unique {
		ix.spec = append(ix.spec, bson.E{Key: "unique", Value: true})
		ix.entries = map[string]string{}
	}
	if ix.sparse {
		ix.spec = append(ix.spec, bson.E{Key: "sparse", Value: true})
	}
	if ix.partial != nil {
		ix.spec = append(ix.spec, bson.E{Key: "partialFilterExpression", Value: ix.partial})
	}
	if ix.expireAfter != nil {
		ix.spec = append(ix.spec, bson.E{Key: "expireAfterSeconds", Value: int32(*ix.expireAfter)})
	}
	return ix, nil
}

// sameOptions reports whether two indexes with the same key pattern are
// equivalent.
func (ix *index) sameOptions(o *index) bool {
	return ix.unique == o.unique && ix.sparse == o.sparse &&
		((ix.expireAfter == nil) == (o.expireAfter == nil)) &&
		(ix.expireAfter == nil || *ix.expireAfter == *o.expireAfter) &&
		valuesEqual(ix.partial, o.partial)
}

// indexed reports whether doc has entries in the index.
func (ix *index) indexed(doc bson.D) bool {
	if doc == nil {
		return false
	}
	if ix.partialM != nil && !ix.partialM(doc) {
		return false
	}
	if ix.sparse {
		for _, k := range ix.keys {
			if len(traverse(doc, k.Key)) > 0 {
				return true
			}
		}
		return false
	}
	return true
}

type indexKey struct {
	str   string
	value bson.D
}

// keysOf returns the index keys of doc (several for array values).
func (ix *index) keysOf(doc bson.D) []indexKey {
	if !ix.indexed(doc) {
		return nil
	}
	combos := []bson.D{{}}
	for _, k := range ix.keys {
		var vals []any
		for _, v := range traverse(doc, k.Key) {
			if a, ok := v.(bson.A); ok {
				if len(a) == 0 {
					vals = append(vals, bson.Undefined{})
				}
				vals = append(vals, a...)
			} else {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			vals = []any{nil}
		}
		next := make([]bson.D, 0, len(combos)*len(vals))
		seen := map[string]bool{}
		for _, c := range combos {
			for _, v := range vals {
				kv := append(append(bson.D{}, c...), bson.E{Key: k.Key, Value: v})
				ks := keyString(kv)
				if !seen[ks] {
					seen[ks] = true
					next = append(next, kv)
				}
			}
		}
		combos = next
	}
	out := make([]indexKey, len(combos))
	for i, c := range combos {
		out[i] = indexKey{str: ix.keyStr(c), value: c}
	}
	return out
}

// keyStr encodes only the values, so that lookups by filter match.
func (ix *index) keyStr(kv bson.D) string {
	var sb strings.Builder
	for _, e := range kv {
		v := e.Value
		if _, ok := v.(bson.Undefined); ok {
			v = nil
		}
		writeKey(&sb, v)
		sb.WriteByte('|')
	}
	return sb.String()
}

func (ix *index) add(key string, doc bson.D) {
	if ix.entries == nil || doc == nil {
		return
	}
	for _, k := range ix.keysOf(doc) {
		ix.entries[k.str] = key
	}
}

func (ix *index) remove(key string, doc bson.D) {
	if ix.entries == nil || doc == nil {
		return
	}
	for _, k := range ix.keysOf(doc) {
		if ix.entries[k.str] == key {
			delete(ix.entries, k.str)
		}
	}
}

// lookupKey returns the index key selected by an equality filter covering
// every field of the index with scalar values.
func (ix *index) lookupKey(filter bson.D) (string, bool) {
	kv := bson.D{}
	for _, k := range ix.keys {
		v, ok := eqValue(filter, k.Key)
		if !ok {
			return "", false
		}
		kv = append(kv, bson.E{Key: k.Key, Value: v})
	}
	return ix.keyStr(kv), true
}

// eqValue finds a top-level scalar equality on field in filter.
func eqValue(filter bson.D, field string) (any, bool) {
	var found any
	n := 0
	for _, e := range filter {
		if e.Key == field {
			n++
			v := e.Value
			if d, ok := isOperatorDoc(v); ok {
				if len(d) != 1 || d[0].Key != "$eq" {
					return nil, false
				}
				v = d[0].Value
			}
			// a literal document matches by exact equality, which keys encode;
			// arrays, regexes and null have wider matching rules
			switch v.(type) {
			case bson.A, bson.Regex, nil, bson.Undefined, bson.MinKey, bson.MaxKey:
				return nil, false
			}
			found = v
		}
	}
	return found, n == 1
}

func eqLookupKey(filter bson.D, field string) (string, bool) {
	v, ok := eqValue(filter, field)
	if !ok {
		return "", false
	}
	return idKey(v), true
}

func dupKeyError(c *collection, ix *index, kv bson.D) *cmdError {
	parts := make([]string, len(kv))
	for i, e := range kv {
		parts[i] = e.Key + ": " + formatValue(e.Value)
	}
	return &cmdError{
		Code: codeDuplicateKey,
		Msg:  fmt.Sprintf("E11000 duplicate key error collection: %s index: %s dup key: { %s }", c.ns(), ix.name, strings.Join(parts, ", ")),
		Extra: bson.D{
			{Key: "keyPattern", Value: keyPattern(ix.keys)},
			{Key: "keyValue", Value: kv},
		},
	}
}

func keyPattern(keys bson.D) bson.D {
	out := make(bson.D, len(keys))
	copy(out, keys)
	return out
}

// checkUnique verifies that writing doc under key keeps every unique index
// unique, as seen by v.
func (st *storage) checkUnique(v view, c *collection, key string, doc bson.D) error {
	if doc == nil {
		return nil
	}
	for _, ix := range c.indexes {
		if ix.entries == nil {
			continue
		}
		keys := ix.keysOf(doc)
		if len(keys) == 0 {
			continue
		}
		if v.tx == nil {
			for _, k := range keys {
				if owner, ok := ix.entries[k.str]; ok && owner != key {
					return dupKeyError(c, ix, k.value)
				}
			}
			continue
		}
		want := map[string]indexKey{}
		for _, k := range keys {
			want[k.str] = k
		}
		for _, other := range v.all(c) {
			if other.key == key {
				continue
			}
			for _, ok2 := range ix.keysOf(other.doc) {
				if k, hit := want[ok2.str]; hit {
					return dupKeyError(c, ix, k.value)
				}
			}
		}
		over := v.tx.writes[c.ns()]
		for _, k := range keys {
			if owner, ok := ix.entries[k.str]; ok && owner != key {
				if _, mine := over[owner]; !mine {
					return errWriteConflict()
				}
			}
		}
	}
	return nil
}

// buildIndex fills the entries of a new unique index, failing on duplicates.
func (st *storage) buildIndex(c *collection, ix *index) error {
	if ix.entries == nil {
		return nil
	}
	for _, kd := range (view{st: st}).all(c) {
		for _, k := range ix.keysOf(kd.doc) {
			if owner, ok := ix.entries[k.str]; ok && owner != kd.key {
				ix.entries = map[string]string{}
				return dupKeyError(c, ix, k.value)
			}
			ix.entries[k.str] = kd.key
		}
	}
	return nil
}

// expireTTL deletes documents whose TTL index date has passed.
func (st *storage) expireTTL(now time.Time) {
	for _, dn := range st.sortedDBNames() {
		d := st.dbs[dn]
		for _, cn := range d.sortedCollNames() {
			c := d.colls[cn]
			for _, ix := range c.indexes {
				if ix.expireAfter == nil {
					continue
				}
				cutoff := now.Add(-time.Duration(*ix.expireAfter) * time.Second)
				for _, kd := range (view{st: st}).all(c) {
					if st.locks[c.ns()+"\x00"+kd.key] != nil {
						continue
					}
					if t, ok := ttlDate(kd.doc, ix.keys[0].Key); ok && t.Before(cutoff) {
						st.ver++
						st.commitWrite(c, kd.key, nil, 0)
						st.appendEvent(&event{op: "delete", db: c.db, coll: c.name, uuid: c.uuid, docKey: docKeyOf(kd.doc), preImage: kd.doc, images: c.prePostImages})
					}
				}
			}
		}
	}
}

func ttlDate(doc bson.D, path string) (time.Time, bool) {
	var best *time.Time
	for _, v := range traverse(doc, path) {
		vals := []any{v}
		if a, ok := v.(bson.A); ok {
			vals = a
		}
		for _, x := range vals {
			if dt, ok := x.(bson.DateTime); ok {
				t := dt.Time()
				if best == nil || t.Before(*best) {
					best = &t
				}
			}
		}
	}
	if best == nil {
		return time.Time{}, false
	}
	return *best, true
}

func docKeyOf(doc bson.D) bson.D {
	id, _ := lookupField(doc, "_id")
	return bson.D{{Key: "_id", Value: id}}
}

// checkPartialFilter allows only the operators MongoDB accepts in a partial
// index filter.
func checkPartialFilter(f bson.D) error {
	for _, e := range f {
		switch e.Key {
		case "$and", "$or":
			arr, _ := e.Value.(bson.A)
			for _, x := range arr {
				if d, ok := x.(bson.D); ok {
					if err := checkPartialFilter(d); err != nil {
						return err
					}
				}
			}
			continue
		}
		if strings.HasPrefix(e.Key, "$") {
			return newErr(67, "Expression not supported in partial index: %s", e.Key)
		}
		if d, ok := isOperatorDoc(e.Value); ok {
			for _, op := range d {
				switch op.Key {
				case "$eq", "$exists", "$gt", "$gte", "$lt", "$lte", "$type", "$in":
				default:
					return newErr(67, "Expression not supported in partial index: %s", op.Key)
				}
			}
		}
	}
	return nil
}

// inLookupKeys finds a top-level {field: {$in: [scalars]}} in filter and
// returns the keys of its values.
func inLookupKeys(filter bson.D, field string) ([]string, bool) {
	var keys []string
	n := 0
	for _, e := range filter {
		if e.Key != field {
			continue
		}
		n++
		d, ok := isOperatorDoc(e.Value)
		if !ok || len(d) != 1 || d[0].Key != "$in" {
			return nil, false
		}
		arr, ok := d[0].Value.(bson.A)
		if !ok {
			return nil, false
		}
		for _, v := range arr {
			switch v.(type) {
			case bson.A, bson.Regex, nil, bson.Undefined, bson.MinKey, bson.MaxKey:
				return nil, false
			}
			if _, isOp := isOperatorDoc(v); isOp {
				return nil, false
			}
			keys = append(keys, idKey(v))
		}
	}
	return keys, n == 1
}
