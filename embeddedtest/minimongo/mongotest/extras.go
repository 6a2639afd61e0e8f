package mongotest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var extraTests = map[string]func(t *testing.T, env Env){
	"Hint": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("h")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("k", 1)})
		require.NoError(t, err)
		_, err = coll.InsertMany(ctx, []any{D("_id", 1, "k", 2), D("_id", 2, "k", 1)})
		require.NoError(t, err)
		got := findAll(t, coll, D("k", D("$gte", 1)), options.Find().SetHint("k_1").SetSort(D("k", 1)))
		require.Equal(t, []any{int32(2), int32(1)}, ids(got))
		got = findAll(t, coll, D(), options.Find().SetHint(D("k", 1)).SetSort(D("_id", 1)))
		require.Len(t, got, 2)
		_, err = coll.Find(ctx, D(), options.Find().SetHint("nope"))
		requireCode(t, err, 2)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("x", 1)), options.UpdateOne().SetHint("nope"))
		requireCode(t, err, 2)
	},
	"DecimalAndMixedArithmetic": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("n")
		_, err := coll.InsertOne(ctx, D("_id", 1, "d", dec("1.5"), "i", int32(2147483647), "l", int64(3)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$inc", D("d", dec("2.25"), "i", int32(1), "l", 0.5), "$mul", D("m", int32(5))))
		require.NoError(t, err)
		raw, err := coll.FindOne(ctx, D("_id", 1)).Raw()
		require.NoError(t, err)
		require.Equal(t, bson.TypeDecimal128, raw.Lookup("d").Type)
		require.Equal(t, "3.75", raw.Lookup("d").Decimal128().String())
		require.Equal(t, bson.TypeInt64, raw.Lookup("i").Type, "int32 overflow promotes to int64")
		require.Equal(t, int64(2147483648), raw.Lookup("i").Int64())
		require.Equal(t, bson.TypeDouble, raw.Lookup("l").Type)
		require.Equal(t, 3.5, raw.Lookup("l").Double())
		require.Equal(t, bson.TypeInt32, raw.Lookup("m").Type)
		require.Equal(t, int32(0), raw.Lookup("m").Int32())
		// unique keys compare numerically across types, fractions included
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("u", 1), Options: options.Index().SetUnique(true)})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 2, "u", 1.5))
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 3, "u", dec("1.50")))
		require.True(t, mongo.IsDuplicateKeyError(err), "%v", err)
	},
	"MoreStagesAndAccumulators": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("a")
		_, err := coll.InsertMany(ctx, []any{
			D("_id", 1, "g", "a", "v", 1, "in", D("x", 1, "y", 2)),
			D("_id", 2, "g", "a", "v", 3, "in", D("x", 3, "y", 4)),
			D("_id", 3, "g", "b", "v", 5),
		})
		require.NoError(t, err)
		got := aggregate(t, coll, A(
			D("$match", D("g", "a")),
			D("$addFields", D("w", "$in.x", "c", D("$literal", 7))),
			D("$set", D("in.z", "$v")),
			D("$unset", A("v", "in.y")),
			D("$project", D("in.x", 0)),
		))
		requireJSON(t, `[{"_id":1,"g":"a","in":{"z":1},"w":1,"c":7},{"_id":2,"g":"a","in":{"z":3},"w":3,"c":7}]`, got)
		got = aggregate(t, coll, A(D("$match", D("_id", 1)), D("$replaceRoot", D("newRoot", "$in"))))
		requireJSON(t, `[{"x":1,"y":2}]`, got)
		got = aggregate(t, coll, A(
			D("$group", D("_id", "$g", "avg", D("$avg", "$v"), "set", D("$addToSet", "$g"), "docs", D("$push", "$$ROOT"))),
			D("$sort", D("_id", 1)),
			D("$project", D("avg", 1, "set", 1, "n", "$docs._id")),
		))
		requireJSON(t, `[{"_id":"a","avg":2.0,"set":["a"],"n":[1,2]},{"_id":"b","avg":5.0,"set":["b"],"n":[3]}]`, got)
	},
	"ExprLookupSortByCount": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		orders, users := env.DB.Collection("orders"), env.DB.Collection("users")
		_, err := users.InsertMany(ctx, []any{D("_id", "u1", "name", "ann"), D("_id", "u2", "name", "bob")})
		require.NoError(t, err)
		_, err = orders.InsertMany(ctx, []any{
			D("_id", 1, "user", "u1", "qty", 5, "min", 3),
			D("_id", 2, "user", "u2", "qty", 1, "min", 3),
			D("_id", 3, "user", "u1", "qty", 4, "min", 4),
			D("_id", 4, "user", "nobody", "qty", 9, "min", 1),
		})
		require.NoError(t, err)
		got := findAll(t, orders, D("$expr", D("$gt", A("$qty", "$min"))), options.Find().SetSort(D("_id", 1)))
		require.Equal(t, []any{int32(1), int32(4)}, ids(got))
		_, err = orders.Find(ctx, D("$expr", D("$divide", A("$qty", 0))))
		requireCode(t, err, 2)
		got = aggregate(t, orders, A(
			D("$match", D("_id", D("$lte", 2))),
			D("$lookup", D("from", "users", "localField", "user", "foreignField", "_id", "as", "who")),
			D("$project", D("who.name", 1)),
		))
		requireJSON(t, `[{"_id":1,"who":[{"name":"ann"}]},{"_id":2,"who":[{"name":"bob"}]}]`, got)
		got = aggregate(t, orders, A(
			D("$match", D("_id", 4)),
			D("$lookup", D("from", "users", "localField", "user", "foreignField", "_id", "as", "who")),
			D("$project", D("who", 1)),
		))
		requireJSON(t, `[{"_id":4,"who":[]}]`, got)
		got = aggregate(t, orders, A(D("$sortByCount", "$user"), D("$limit", 1)))
		requireJSON(t, `[{"_id":"u1","count":2}]`, got)
	},
	"PushSortByField": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("p")
		_, err := coll.InsertOne(ctx, D("_id", 1, "arr", A(D("s", 3), D("s", 1))))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$push", D("arr", D("$each", A(D("s", 2)), "$sort", D("s", -1), "$slice", 2))))
		require.NoError(t, err)
		requireJSON(t, `[{"_id":1,"arr":[{"s":3},{"s":2}]}]`, findAll(t, coll, D()))
	},
	"DropIndexesByKeyAndNames": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("i")
		_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{{Keys: D("a", 1)}, {Keys: D("b", 1)}, {Keys: D("c", -1)}})
		require.NoError(t, err)
		require.NoError(t, env.DB.RunCommand(ctx, D("dropIndexes", "i", "index", D("c", -1))).Err())
		require.NoError(t, env.DB.RunCommand(ctx, D("dropIndexes", "i", "index", A("a_1", "b_1"))).Err())
		specs, err := coll.Indexes().ListSpecifications(ctx)
		require.NoError(t, err)
		require.Len(t, specs, 1)
		err = env.DB.RunCommand(ctx, D("dropIndexes", "i", "index", D("zz", 1))).Err()
		requireCode(t, err, 27)
	},
	"ProjectionsAndExpressions": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("pr")
		_, err := coll.InsertOne(ctx, D("_id", 1, "a", D("b", 1, "c", 2), "arr", A(D("x", 1, "y", 1), D("x", 2, "y", 2), 5)))
		require.NoError(t, err)
		got := findAll(t, coll, D(), options.Find().SetProjection(D("a.c", 0, "arr.y", 0)))
		requireJSON(t, `[{"_id":1,"a":{"b":1},"arr":[{"x":1},{"x":2},5]}]`, got)
		got = findAll(t, coll, D(), options.Find().SetProjection(D("arr.x", 1, "_id", 0)))
		requireJSON(t, `[{"arr":[{"x":1},{"x":2}]}]`, got)
		got = findAll(t, coll, D(), options.Find().SetProjection(D("xs", "$arr.x", "root", "$$ROOT.a.b", "_id", 0)))
		requireJSON(t, `[{"xs":[1,2],"root":1}]`, got)
	},
}
