package mongotest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func aggregate(t *testing.T, coll *mongo.Collection, pipeline any, opts ...options.Lister[options.AggregateOptions]) []bson.D {
	t.Helper()
	ctx := ctxFor(t)
	cur, err := coll.Aggregate(ctx, pipeline, opts...)
	require.NoError(t, err)
	var out []bson.D
	require.NoError(t, cur.All(ctx, &out))
	return out
}

var aggregateTests = map[string]func(t *testing.T, env Env){
	"Stages": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("a")
		_, err := coll.InsertMany(ctx, []any{
			D("_id", 1, "cat", "x", "qty", 5, "price", 1.5, "tags", A("a", "b"), "who", D("name", "ann")),
			D("_id", 2, "cat", "y", "qty", 2, "price", 3.0, "tags", A("b"), "who", D("name", "bob")),
			D("_id", 3, "cat", "x", "qty", 7, "price", 2.0, "tags", A(), "who", D("name", "cy")),
			D("_id", 4, "cat", "z", "qty", int64(1), "who", D("name", "dee")),
		})
		require.NoError(t, err)
		got := aggregate(t, coll, A(
			D("$match", D("qty", D("$gte", 2))),
			D("$sort", D("qty", -1)),
			D("$skip", 1),
			D("$limit", 1),
			D("$project", D("qty", 1, "name", "$who.name", "lit", D("$literal", "$x"))),
		))
		requireJSON(t, `[{"_id":1,"qty":5,"name":"ann","lit":"$x"}]`, got)
		got = aggregate(t, coll, A(D("$match", D("cat", "x")), D("$count", "n")))
		requireJSON(t, `[{"n":2}]`, got)
		got = aggregate(t, coll, A(D("$match", D("cat", "none")), D("$count", "n")))
		require.Empty(t, got)
		got = aggregate(t, coll, A(
			D("$group", D("_id", "$cat",
				"total", D("$sum", "$qty"),
				"count", D("$sum", 1),
				"min", D("$min", "$qty"),
				"max", D("$max", "$qty"),
				"first", D("$first", "$_id"),
				"last", D("$last", "$_id"),
				"ids", D("$push", "$_id"),
			)),
			D("$sort", D("_id", 1)),
		))
		requireJSON(t, `[{"_id":"x","total":12,"count":2,"min":5,"max":7,"first":1,"last":3,"ids":[1,3]},`+
			`{"_id":"y","total":2,"count":1,"min":2,"max":2,"first":2,"last":2,"ids":[2]},`+
			`{"_id":"z","total":1,"count":1,"min":1,"max":1,"first":4,"last":4,"ids":[4]}]`, got)
		got = aggregate(t, coll, A(
			D("$group", D("_id", D("c", "$cat", "big", "$who.name"), "n", D("$sum", 1))),
			D("$match", D("_id.c", "y")),
		))
		requireJSON(t, `[{"_id":{"c":"y","big":"bob"},"n":1}]`, got)
		got = aggregate(t, coll, A(D("$group", D("_id", nil, "sum", D("$sum", "$price")))))
		requireJSON(t, `[{"_id":null,"sum":6.5}]`, got)
		got = aggregate(t, coll, A(D("$unwind", "$tags"), D("$project", D("tags", 1))))
		requireJSON(t, `[{"_id":1,"tags":"a"},{"_id":1,"tags":"b"},{"_id":2,"tags":"b"}]`, got)
		got = aggregate(t, coll, A(
			D("$unwind", D("path", "$tags", "preserveNullAndEmptyArrays", true, "includeArrayIndex", "i")),
			D("$match", D("_id", D("$gte", 3))),
			D("$project", D("tags", 1, "i", 1)),
		))
		requireJSON(t, `[{"_id":3,"i":null},{"_id":4,"i":null}]`, got)
		// CountDocuments is an aggregation with $group on a constant _id.
		n, err := coll.CountDocuments(ctx, D("tags", "b"))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		// cursor batching through getMore
		cur, err := coll.Aggregate(ctx, A(D("$sort", D("_id", 1))), options.Aggregate().SetBatchSize(1))
		require.NoError(t, err)
		var all []bson.D
		require.NoError(t, cur.All(ctx, &all))
		require.Len(t, all, 4)
	},
	"Expressions": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("x")
		_, err := coll.InsertOne(ctx, D("_id", 1, "a", int32(5), "b", int64(2), "f", 1.5, "s", "Hi", "arr", A(1, 2, 3),
			"d", bson.DateTime(1000), "d2", bson.DateTime(400), "n", nil))
		require.NoError(t, err)
		got := aggregate(t, coll, A(D("$project", D(
			"_id", 0,
			"add", D("$add", A("$a", "$b")),
			"addf", D("$add", A("$a", "$f")),
			"sub", D("$subtract", A("$a", 1)),
			"subd", D("$subtract", A("$d", "$d2")),
			"mul", D("$multiply", A("$a", "$b", 2)),
			"div", D("$divide", A("$a", 2)),
			"mod", D("$mod", A("$a", 3)),
			"cat", D("$concat", A("$s", "!", "$s")),
			"catnull", D("$concat", A("$s", "$n")),
			"up", D("$toUpper", "$s"),
			"low", D("$toLower", "$s"),
			"eq", D("$eq", A("$a", 5)),
			"gt", D("$gt", A("$a", "$f")),
			"lt", D("$lt", A("$s", 1)),
			"cmp", D("$cmp", A("$a", 7)),
			"and", D("$and", A(true, "$a")),
			"or", D("$or", A(false, 0)),
			"not", D("$not", A("$n")),
			"cond", D("$cond", A(D("$gt", A("$a", 3)), "big", "small")),
			"condd", D("$cond", D("if", "$n", "then", 1, "else", 2)),
			"ifnull", D("$ifNull", A("$nope", "dflt")),
			"ifnull2", D("$ifNull", A("$a", 0)),
			"size", D("$size", "$arr"),
			"last", D("$arrayElemAt", A("$arr", -1)),
			"in", D("$in", A(2, "$arr")),
			"type", D("$type", "$f"),
			"typem", D("$type", "$nope"),
		))))
		requireJSON(t, `[{"add":7,"addf":6.5,"sub":4,"subd":600,"mul":20,"div":2.5,"mod":2,"cat":"Hi!Hi","catnull":null,`+
			`"up":"HI","low":"hi","eq":true,"gt":true,"lt":false,"cmp":-1,"and":true,"or":false,"not":true,`+
			`"cond":"big","condd":2,"ifnull":"dflt","ifnull2":5,"size":3,"last":3,"in":true,"type":"double","typem":"missing"}]`, got)
		for _, tc := range []struct {
			expr bson.D
			code int
		}{
			{D("$divide", A("$a", 0)), 2},
			{D("$size", "$a"), 17124},
			{D("$concat", A("$s", 1)), 16702},
		} {
			_, err := coll.Aggregate(ctx, A(D("$project", D("x", tc.expr))))
			requireCode(t, err, tc.code)
		}
	},
	"UnknownStage": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		_, err := env.DB.Collection("a").Aggregate(ctx, A(D("$foo", D())))
		requireCode(t, err, 40324)
	},
}
