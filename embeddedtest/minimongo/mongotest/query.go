package mongotest

import (
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func dec(s string) bson.Decimal128 {
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		panic(err)
	}
	return d
}

var queryDocs = []any{
	D("_id", int32(1), "n", int32(5), "s", "apple", "tags", A("red", "green"), "sub", D("k", int32(1), "arr", A(D("v", int32(1)), D("v", int32(2))))),
	D("_id", int32(2), "n", int64(7), "s", "banana", "tags", A("yellow"), "sub", D("k", int32(2))),
	D("_id", int32(3), "n", 5.0, "s", "cherry", "tags", A(), "nul", nil),
	D("_id", int32(4), "n", dec("6.5"), "s", "Apple pie", "tags", A("red", "yellow", "green")),
	D("_id", int32(5), "n", "5", "arr", A(int32(1), int32(5), int32(9)), "sub", D("arr", A(D("v", int32(3)), D("w", int32(1))))),
	D("_id", int32(6), "arr", A(A(int32(1), int32(2)), int32(3)), "when", bson.DateTime(1000), "b", true),
	D("_id", int32(7), "n", math.NaN(), "nested", D("a", D("b", D("c", "deep")))),
}

var queryCases = []struct {
	name   string
	filter bson.D
	want   []int32
}{
	{"empty", D(), []int32{1, 2, 3, 4, 5, 6, 7}},
	{"eq int matches long double", D("n", 5), []int32{1, 3}},
	{"eq long", D("n", int64(7)), []int32{2}},
	{"eq decimal", D("n", dec("6.50")), []int32{4}},
	{"eq explicit", D("n", D("$eq", 7.0)), []int32{2}},
	{"eq string not number", D("n", "5"), []int32{5}},
	{"gt numbers only", D("n", D("$gt", 5)), []int32{2, 4}},
	{"gte", D("n", D("$gte", 5)), []int32{1, 2, 3, 4}},
	{"lt", D("n", D("$lt", 6.5)), []int32{1, 3}},
	{"lte decimal", D("n", D("$lte", dec("6.5"))), []int32{1, 3, 4}},
	{"range and", D("n", D("$gt", 5, "$lt", 7)), []int32{4}},
	{"gt string", D("s", D("$gt", "b")), []int32{2, 3}},
	{"nan eq", D("n", math.NaN()), []int32{7}},
	{"ne", D("n", D("$ne", 5)), []int32{2, 4, 5, 6, 7}},
	{"in", D("n", D("$in", A(int64(5), "5"))), []int32{1, 3, 5}},
	{"in regex", D("s", D("$in", A(bson.Regex{Pattern: "^a"}, "cherry"))), []int32{1, 3}},
	{"nin", D("n", D("$nin", A(5, 7))), []int32{4, 5, 6, 7}},
	{"in on _id", D("_id", D("$in", A(3, 1, 99, int64(3)))), []int32{1, 3}},
	{"in on _id numeric types", D("_id", D("$in", A(int64(2), 4.0))), []int32{2, 4}},
	{"eq on _id with other conditions", D("_id", 2.0, "s", "banana"), []int32{2}},
	{"eq on _id not matching other conditions", D("_id", 2, "s", "apple"), nil},
	{"exists", D("sub", D("$exists", true)), []int32{1, 2, 5}},
	{"not exists", D("n", D("$exists", false)), []int32{6}},
	{"null matches missing and null", D("nul", nil), []int32{1, 2, 3, 4, 5, 6, 7}},
	{"null exists", D("nul", D("$exists", true)), []int32{3}},
	{"type null", D("nul", D("$type", "null")), []int32{3}},
	{"and", D("$and", A(D("n", D("$gte", 5)), D("tags", "red"))), []int32{1, 4}},
	{"or", D("$or", A(D("n", int64(7)), D("s", "cherry"))), []int32{2, 3}},
	{"nor", D("$nor", A(D("n", 5), D("n", D("$exists", false)))), []int32{2, 4, 5, 7}},
	{"not", D("n", D("$not", D("$gt", 5))), []int32{1, 3, 5, 6, 7}},
	{"not regex", D("s", D("$not", bson.Regex{Pattern: "an"})), []int32{1, 3, 4, 5, 6, 7}},
	{"regex", D("s", D("$regex", "^a")), []int32{1}},
	{"regex options", D("s", D("$regex", "^a", "$options", "i")), []int32{1, 4}},
	{"regex literal", D("s", bson.Regex{Pattern: "e$"}), []int32{1, 4}},
	{"type number", D("n", D("$type", "number")), []int32{1, 2, 3, 4, 7}},
	{"type int", D("n", D("$type", "int")), []int32{1}},
	{"type code list", D("n", D("$type", A(18, "decimal"))), []int32{2, 4}},
	{"type array", D("tags", D("$type", "array")), []int32{1, 2, 3, 4}},
	{"type string element", D("tags", D("$type", "string")), []int32{1, 2, 4}},
	{"type date and bool", D("$or", A(D("when", D("$type", "date")), D("b", D("$type", "bool")))), []int32{6}},
	{"size", D("tags", D("$size", 1)), []int32{2}},
	{"size zero", D("tags", D("$size", 0)), []int32{3}},
	{"all", D("tags", D("$all", A("red", "green"))), []int32{1, 4}},
	{"array contains", D("tags", "yellow"), []int32{2, 4}},
	{"array exact", D("tags", A("red", "green")), []int32{1}},
	{"array order matters", D("tags", A("green", "red")), nil},
	{"empty array eq", D("tags", A()), []int32{3}},
	{"array element range", D("arr", D("$gt", 8)), []int32{5}},
	{"array element range both bounds any", D("arr", D("$gt", 1, "$lt", 5)), []int32{5, 6}},
	{"elemMatch scalar", D("arr", D("$elemMatch", D("$gt", 1, "$lt", 6))), []int32{5, 6}},
	{"elemMatch doc", D("sub.arr", D("$elemMatch", D("v", D("$gte", 2)))), []int32{1, 5}},
	{"nested array elem", D("arr", A(int32(1), int32(2))), []int32{6}},
	{"dotted", D("sub.k", 2), []int32{2}},
	{"dotted through array", D("sub.arr.v", 2), []int32{1}},
	{"dotted index", D("tags.1", "green"), []int32{1}},
	{"dotted index 0", D("arr.0", 1), []int32{5, 6}},
	{"deep", D("nested.a.b.c", "deep"), []int32{7}},
	{"doc equality exact", D("sub", D("k", int32(2))), []int32{2}},
	{"doc equality order", D("nested", D("a", D("b", D("c", "deep")))), []int32{7}},
	{"dotted missing null", D("sub.arr.w", nil), []int32{1, 2, 3, 4, 5, 6, 7}},
	{"comment ignored", D("$comment", "hi", "_id", 3), []int32{3}},
	{"mod", D("n", D("$mod", A(2, 1))), []int32{1, 2, 3}},
	{"date gt", D("when", D("$gt", bson.DateTime(500))), []int32{6}},
	{"bool", D("b", true), []int32{6}},
}

var queryTests = map[string]func(t *testing.T, env Env){
	"Operators": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("q")
		_, err := coll.InsertMany(ctx, queryDocs)
		require.NoError(t, err)
		for _, tc := range queryCases {
			t.Run(tc.name, func(t *testing.T) {
				got := findAll(t, coll, tc.filter, options.Find().SetSort(D("_id", 1)).SetProjection(D("_id", 1)))
				want := []any{}
				for _, id := range tc.want {
					want = append(want, id)
				}
				require.Equal(t, want, append([]any{}, ids(got)...), "filter %v", tc.filter)
			})
		}
	},
	"SortAcrossTypes": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("s")
		oid := bson.NewObjectIDFromTimestamp(time.Unix(1000, 0))
		_, err := coll.InsertMany(ctx, []any{
			D("_id", 1, "v", "b"),
			D("_id", 2, "v", int64(3)),
			D("_id", 3, "v", 2.5),
			D("_id", 4, "v", nil),
			D("_id", 5, "v", D("x", 1)),
			D("_id", 6, "v", true),
			D("_id", 7, "v", bson.DateTime(5)),
			D("_id", 8, "v", oid),
			D("_id", 9),
			D("_id", 10, "v", dec("2.75")),
			D("_id", 11, "v", "a"),
			D("_id", 12, "v", bson.MaxKey{}),
			D("_id", 13, "v", bson.MinKey{}),
			D("_id", 14, "v", bson.Binary{Data: []byte{1}}),
			D("_id", 15, "v", A(int32(10), int32(1))),
			D("_id", 16, "v", bson.Timestamp{T: 1, I: 1}),
			D("_id", 17, "v", int32(-4)),
		})
		require.NoError(t, err)
		got := findAll(t, coll, D(), options.Find().SetSort(D("v", 1, "_id", 1)))
		require.Equal(t, []any{int32(13), int32(4), int32(9), int32(17), int32(15), int32(3), int32(10), int32(2), int32(11), int32(1), int32(5), int32(14), int32(8), int32(6), int32(7), int32(16), int32(12)}, ids(got))
		got = findAll(t, coll, D("v", D("$type", "number")), options.Find().SetSort(D("v", -1)))
		require.Equal(t, []any{int32(15), int32(2), int32(10), int32(3), int32(17)}, ids(got))
	},
	"RegexMatchesDotted": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("r")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "a", A(D("b", "xyz")))})
		require.NoError(t, err)
		got := findAll(t, coll, D("a.b", D("$regex", regexp.QuoteMeta("y"))))
		require.Len(t, got, 1)
	},
}
