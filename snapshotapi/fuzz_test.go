package snapshotapi

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FuzzListQuery feeds arbitrary query strings to the list grammar. Whatever it accepts must
// build a filter that names only declared fields and the grammar's operators, with scalar
// operands, and that encodes to BSON; whatever it refuses must be a 400 in the error shape.
// The seed corpus is below and in testdata/fuzz/FuzzListQuery; `make test` fuzzes briefly.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{
		"", "status=eq.paid", "total=gt.10&total=lt.20", "status=in.(a,\"b,c\")", "status=prefix.ab",
		"created=gte.2026-01-01T00:00:00Z", "created=lt.1767323045000", "paid=eq.true", "customer.id=eq.7",
		"order=created.desc&limit=5", "order=customer.id.asc", "after=0:1,3:99&wait=1s", "meta=1",
		"$where=1", "status[$ne]=x", "status=$ne.x", "status=eq.$gt", "total=eq.NaN", "limit=99999999999",
		"status=in.(", "status=in.(\"a", "status=eq.%zz", "a=1;b=2", "cursor=AAAA", "order=.asc",
		"status=eq.\x00", "total=eq.-0", "total=eq.1e308", "created=eq.0", "=x", "&&&", "status",
	} {
		f.Add(s)
	}
	v := testView()
	declared := map[string]bool{"_deleted": true, "_id": true}
	for name := range v.Filters {
		declared[name] = true
	}
	codec := newCursorCodec([]byte(strings.Repeat("f", 32)))
	f.Fuzz(func(t *testing.T, q string) {
		params, e := splitQuery(q, 4096)
		if e == nil {
			var lp listParams
			lp, e = parseListParams(params, v, 10*time.Second)
			if e == nil {
				and := bson.A{}
				for _, c := range lp.conds {
					and = append(and, c.filter())
				}
				if lp.cursor != "" {
					ks, ce := codec.decode(lp.cursor, lp.binding(v.Name))
					if ce == nil {
						t.Fatalf("a cursor nobody issued was accepted: %q", lp.cursor)
					}
					_ = ks
				}
				filter := bson.D{{Key: "$and", Value: and}}
				raw, err := bson.Marshal(filter)
				if err != nil {
					t.Fatalf("filter of %q does not encode: %v", q, err)
				}
				walkFilter(t, bson.Raw(raw), declared)
				if lp.limit < 1 || lp.limit > v.MaxLimit {
					t.Fatalf("limit %d accepted", lp.limit)
				}
				if lp.order.field != "_id" && lp.order.field != "created" && lp.order.field != "customer.id" {
					t.Fatalf("order by %q accepted", lp.order.field)
				}
				return
			}
		}
		if e.Status != 400 || e.Code == "" || e.Message == "" {
			t.Fatalf("refusal of %q is not a 400 in the error shape: %+v", q, e)
		}
	})
}

var fuzzOps = map[string]bool{"$and": true, "$or": true, "$eq": true, "$ne": true, "$gt": true, "$gte": true,
	"$lt": true, "$lte": true, "$in": true, "$nin": true, "$regex": true}

func walkFilter(t *testing.T, f bson.Raw, declared map[string]bool) {
	elems, err := f.Elements()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range elems {
		k := e.Key()
		switch {
		case k == "$and" || k == "$or":
			vals, _ := e.Value().Array().Values()
			for _, v := range vals {
				walkFilter(t, v.Document(), declared)
			}
		case declared[k]:
			ops, err := e.Value().Document().Elements()
			if err != nil {
				t.Fatalf("field %s holds no operator document", k)
			}
			for _, op := range ops {
				if !fuzzOps[op.Key()] {
					t.Fatalf("operator %q under %s", op.Key(), k)
				}
				switch op.Value().Type {
				case bson.TypeEmbeddedDocument:
					t.Fatalf("document operand under %s.%s", k, op.Key())
				case bson.TypeArray:
					vals, _ := op.Value().Array().Values()
					for _, x := range vals {
						if x.Type == bson.TypeEmbeddedDocument || x.Type == bson.TypeArray {
							t.Fatalf("nested operand under %s.%s", k, op.Key())
						}
					}
				}
			}
		default:
			t.Fatalf("filter names %q", k)
		}
	}
}

// FuzzCursor: no string decodes as a cursor unless this API signed it, and none panics.
func FuzzCursor(f *testing.F) {
	codec := newCursorCodec([]byte(strings.Repeat("c", 32)))
	var binding [16]byte
	good := codec.encode(binding, keyset{value: bson.RawValue{Type: bson.TypeNull}, id: "k"})
	for _, s := range []string{"", "A", good, good[:len(good)-1], good + "A", strings.Repeat("_", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, e := codec.decode(s, binding); e == nil && s != good {
			t.Fatalf("accepted %q", s)
		}
	})
}
