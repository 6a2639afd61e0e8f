package mongotest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var updateCases = []struct {
	name   string
	start  bson.D
	update bson.D
	want   string
}{
	{"set new and existing", D("a", 1), D("$set", D("a", 2, "b", "x")), `{"a":2,"b":"x"}`},
	{"set dotted creates", D("a", 1), D("$set", D("m.n.o", 1)), `{"a":1,"m":{"n":{"o":1}}}`},
	{"set array index", D("arr", A(1, 2, 3)), D("$set", D("arr.1", 9)), `{"arr":[1,9,3]}`},
	{"set array pads", D("arr", A(1)), D("$set", D("arr.3", 4)), `{"arr":[1,null,null,4]}`},
	{"set lexicographic order of new fields", D(), D("$set", D("z", 1, "b", 2, "m", 3)), `{"b":2,"m":3,"z":1}`},
	{"unset", D("a", 1, "b", D("c", 1, "d", 2)), D("$unset", D("a", "", "b.c", "", "missing", "")), `{"b":{"d":2}}`},
	{"inc int", D("n", int32(1)), D("$inc", D("n", int32(2))), `{"n":3}`},
	{"inc missing", D(), D("$inc", D("n", int64(5))), `{"n":5}`},
	{"inc double", D("n", int32(1)), D("$inc", D("n", 0.5)), `{"n":1.5}`},
	{"inc negative nested", D("s", D("n", 10)), D("$inc", D("s.n", -3)), `{"s":{"n":7}}`},
	{"mul", D("n", 3), D("$mul", D("n", 4)), `{"n":12}`},
	{"min lowers", D("n", 5), D("$min", D("n", 3)), `{"n":3}`},
	{"min keeps", D("n", 5), D("$min", D("n", 8)), `{"n":5}`},
	{"max raises", D("n", 5), D("$max", D("n", 8, "m", 1)), `{"n":8,"m":1}`},
	{"max across types", D("n", 5), D("$max", D("n", "s")), `{"n":"s"}`},
	{"setOnInsert ignored on update", D("a", 1), D("$setOnInsert", D("b", 1), "$set", D("c", 1)), `{"a":1,"c":1}`},
	{"push", D("arr", A(1)), D("$push", D("arr", 2)), `{"arr":[1,2]}`},
	{"push creates", D(), D("$push", D("arr", D("x", 1))), `{"arr":[{"x":1}]}`},
	{"push each", D("arr", A(1)), D("$push", D("arr", D("$each", A(2, 3)))), `{"arr":[1,2,3]}`},
	{"push each position slice", D("arr", A(1, 2)), D("$push", D("arr", D("$each", A(9), "$position", 0, "$slice", 2))), `{"arr":[9,1]}`},
	{"push each sort", D("arr", A(3, 1)), D("$push", D("arr", D("$each", A(2), "$sort", 1))), `{"arr":[1,2,3]}`},
	{"pull value", D("arr", A(1, 2, 1, 3)), D("$pull", D("arr", 1)), `{"arr":[2,3]}`},
	{"pull condition", D("arr", A(1, 5, 9)), D("$pull", D("arr", D("$gte", 5))), `{"arr":[1]}`},
	{"pull doc query", D("arr", A(D("k", 1, "v", 1), D("k", 2))), D("$pull", D("arr", D("k", 1))), `{"arr":[{"k":2}]}`},
	{"pull missing field", D("a", 1), D("$pull", D("arr", 1)), `{"a":1}`},
	{"addToSet", D("arr", A(1, 2)), D("$addToSet", D("arr", 2)), `{"arr":[1,2]}`},
	{"addToSet each", D("arr", A(1)), D("$addToSet", D("arr", D("$each", A(1, 2, 2, 3)))), `{"arr":[1,2,3]}`},
	{"addToSet doc", D("arr", A(D("a", 1))), D("$addToSet", D("arr", D("a", 1))), `{"arr":[{"a":1}]}`},
	{"pop last", D("arr", A(1, 2, 3)), D("$pop", D("arr", 1)), `{"arr":[1,2]}`},
	{"pop first", D("arr", A(1, 2, 3)), D("$pop", D("arr", -1)), `{"arr":[2,3]}`},
	{"rename", D("a", 1, "b", 2), D("$rename", D("a", "c.d")), `{"b":2,"c":{"d":1}}`},
	{"rename missing", D("b", 2), D("$rename", D("a", "c")), `{"b":2}`},
}

var updateTests = map[string]func(t *testing.T, env Env){
	"Operators": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("u")
		for i, tc := range updateCases {
			t.Run(tc.name, func(t *testing.T) {
				doc := append(D("_id", int32(i)), tc.start...)
				_, err := coll.InsertOne(ctx, doc)
				require.NoError(t, err)
				_, err = coll.UpdateOne(ctx, D("_id", int32(i)), tc.update)
				require.NoError(t, err)
				got := findAll(t, coll, D("_id", int32(i)), options.Find().SetProjection(D("_id", 0)))
				require.Len(t, got, 1)
				requireJSON(t, tc.want, got[0])
			})
		}
	},
	"CurrentDate": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("u")
		before := time.Now().Add(-time.Minute)
		_, err := coll.UpdateOne(ctx, D("_id", 1), D("$currentDate", D("d", true, "ts", D("$type", "timestamp"))), options.UpdateOne().SetUpsert(true))
		require.NoError(t, err)
		var got struct {
			D  time.Time      `bson:"d"`
			TS bson.Timestamp `bson:"ts"`
		}
		require.NoError(t, coll.FindOne(ctx, D("_id", 1)).Decode(&got))
		require.True(t, got.D.After(before))
		require.Greater(t, got.TS.T, uint32(before.Unix()))
	},
	"Upsert": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("u")
		res, err := coll.UpdateOne(ctx, D("k", "a", "n.m", 1, "r", D("$gt", 1), "e", D("$eq", 3)),
			D("$set", D("x", 1), "$setOnInsert", D("created", true), "$inc", D("c", 1)), options.UpdateOne().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.UpsertedCount)
		got := findAll(t, coll, D(), options.Find().SetProjection(D("_id", 0)))
		requireJSON(t, `[{"k":"a","n":{"m":1},"e":3,"c":1,"created":true,"x":1}]`, got)
		res, err = coll.UpdateOne(ctx, D("k", "a"), D("$set", D("x", 2), "$setOnInsert", D("created", false)), options.UpdateOne().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.MatchedCount)
		require.Equal(t, int64(0), res.UpsertedCount)
		got = findAll(t, coll, D(), options.Find().SetProjection(D("_id", 0, "x", 1, "created", 1)))
		requireJSON(t, `[{"created":true,"x":2}]`, got)
		res, err = coll.UpdateOne(ctx, D("_id", "given"), D("$set", D("v", 1)), options.UpdateOne().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, "given", res.UpsertedID)
		// document-valued _id, from the filter of a replacement upsert
		res, err = coll.ReplaceOne(ctx, D("_id", D("t", "a", "n", 1)), D("v", 1), options.Replace().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.UpsertedCount)
		res, err = coll.ReplaceOne(ctx, D("_id", D("t", "a", "n", 1)), D("v", 2), options.Replace().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.ModifiedCount)
		requireJSON(t, `[{"_id":{"t":"a","n":1},"v":2}]`, findAll(t, coll, D("_id", D("t", "a", "n", 1))))
		require.Empty(t, findAll(t, coll, D("_id", D("n", 1, "t", "a"))), "document equality depends on field order")
	},
	"Positional": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("u")
		_, err := coll.InsertOne(ctx, D("_id", 1, "items", A(D("id", 1, "q", 1), D("id", 2, "q", 1)), "arr", A(1, 3, 5)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1, "items.id", 2), D("$set", D("items.$.q", 5)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("arr", 3), D("$set", D("arr.$", 30)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("items", D("$elemMatch", D("id", 1, "q", 1))), D("$inc", D("items.$.q", 10)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$inc", D("items.$[].q", 1)))
		require.NoError(t, err)
		requireJSON(t, `[{"_id":1,"items":[{"id":1,"q":12},{"id":2,"q":6}],"arr":[1,30,5]}]`, findAll(t, coll, D()))
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("items.$.q", 0)))
		requireCode(t, err, 2)
		var got bson.D
		require.NoError(t, coll.FindOneAndUpdate(ctx, D("items.id", 2), D("$set", D("items.$.q", 7)),
			options.FindOneAndUpdate().SetReturnDocument(options.After).SetProjection(D("items", 1, "_id", 0))).Decode(&got))
		requireJSON(t, `{"items":[{"id":1,"q":12},{"id":2,"q":7}]}`, got)
	},
	"Errors": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("u")
		_, err := coll.InsertOne(ctx, D("_id", 1, "s", "str", "arr", 1))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$inc", D("s", 1)))
		requireCode(t, err, 14)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$inc", D("s", "x")))
		requireCode(t, err, 14)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("_id", 2)))
		requireCode(t, err, 66)
		_, err = coll.ReplaceOne(ctx, D("_id", 1), D("_id", 2, "x", 1))
		requireCode(t, err, 66)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("a", 1), "$unset", D("a", "")))
		requireCode(t, err, 40)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("a.b", 1, "a", 2)))
		requireCode(t, err, 40)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$push", D("arr", 1)))
		requireCode(t, err, 2)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("s.x", 1)))
		requireCode(t, err, 28)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$foo", D("a", 1)))
		requireCode(t, err, 9)
		requireJSON(t, `[{"_id":1,"s":"str","arr":1}]`, findAll(t, coll, D()))
	},
}
