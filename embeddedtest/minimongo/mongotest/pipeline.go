package mongotest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// versionGuard is the projector's version guard: the fields change only when the
// incoming version $$new_v is newer than the stored _v.
func versionGuard() bson.A {
	newer := D("$gt", A("$$new_v", "$_v"))
	return A(D("$set", D(
		"a", D("$cond", A(newer, "$$new_a", "$a")),
		"_v", D("$max", A("$_v", "$$new_v")),
	)))
}

var pipelineUpdateCases = []struct {
	name     string
	start    bson.D
	update   bson.A
	let      bson.D
	want     string
	modified int64
}{
	{"version guard applies a newer version", D("_v", 3, "a", "old"), versionGuard(), D("new_v", 5, "new_a", "new"), `{"_v":5,"a":"new"}`, 1},
	{"version guard ignores an older version", D("_v", 3, "a", "old"), versionGuard(), D("new_v", 2, "new_a", "new"), `{"_v":3,"a":"old"}`, 0},
	{"version guard ignores the same version", D("_v", 3, "a", "old"), versionGuard(), D("new_v", 3, "new_a", "new"), `{"_v":3,"a":"old"}`, 0},
	{"set appends new fields in order", D("b", 1), A(D("$set", D("z", 1, "c", D("$add", A("$b", 1))))), nil, `{"b":1,"z":1,"c":2}`, 1},
	{"addFields then unset", D("a", 1, "b", D("c", 1, "d", 2)), A(D("$addFields", D("x", "$b.d")), D("$unset", A("a", "b.c"))), nil, `{"b":{"d":2},"x":2}`, 1},
	{"switch", D("n", 7), A(D("$set", D("size", D("$switch", D(
		"branches", A(D("case", D("$lt", A("$n", 5)), "then", "small"), D("case", D("$lt", A("$n", 10)), "then", "medium")),
		"default", "large"))))), nil, `{"n":7,"size":"medium"}`, 1},
	{"min and max of an array", D("arr", A(4, 9, 1)), A(D("$set", D("lo", D("$min", "$arr"), "hi", D("$max", "$arr")))), nil, `{"arr":[4,9,1],"lo":1,"hi":9}`, 1},
	{"replaceWith keeps the _id", D("a", 1, "b", 2), A(D("$replaceWith", D("c", "$a"))), nil, `{"c":1}`, 1},
	{"replaceWith mergeObjects", D("a", 1, "s", D("x", 1)), A(D("$replaceWith", D("$mergeObjects", A("$$ROOT", "$s", D("a", 5))))), nil, `{"a":5,"s":{"x":1},"x":1}`, 1},
	{"replaceRoot", D("in", D("k", "v")), A(D("$replaceRoot", D("newRoot", "$in"))), nil, `{"k":"v"}`, 1},
	{"project", D("a", 1, "b", 2), A(D("$project", D("a", 1, "sum", D("$add", A("$a", "$b"))))), nil, `{"a":1,"sum":3}`, 1},
	{"remove a field with $$REMOVE", D("a", 1, "b", 2), A(D("$set", D("a", "$$REMOVE"))), nil, `{"b":2}`, 1},
	{"no change is not a modification", D("a", 1), A(D("$set", D("a", 1))), nil, `{"a":1}`, 0},
}

var arrayFilterCases = []struct {
	name    string
	start   bson.D
	update  bson.D
	filters []any
	want    string
}{
	{"set matching elements", D("arr", A(1, 5, 9)), D("$set", D("arr.$[x]", 0)), []any{D("x", D("$gte", 5))}, `{"arr":[1,0,0]}`},
	{"inc a field of matching documents", D("items", A(D("k", "a", "q", 1), D("k", "b", "q", 1), D("k", "a", "q", 3))),
		D("$inc", D("items.$[it].q", 10)), []any{D("it.k", "a")}, `{"items":[{"k":"a","q":11},{"k":"b","q":1},{"k":"a","q":13}]}`},
	{"nested identifiers", D("g", A(D("xs", A(1, 2)), D("xs", A(3)))),
		D("$set", D("g.$[o].xs.$[i]", 0)), []any{D("o.xs", D("$size", 2)), D("i", D("$gt", 1))}, `{"g":[{"xs":[1,0]},{"xs":[3]}]}`},
	{"no element matches", D("arr", A(1, 2)), D("$set", D("arr.$[x]", 0)), []any{D("x", 9)}, `{"arr":[1,2]}`},
	{"with all-positional", D("m", A(A(1, 5), A(6))), D("$set", D("m.$[].$[x]", 0)), []any{D("x", D("$gt", 4))}, `{"m":[[1,0],[0]]}`},
}

var pipelineUpdateTests = map[string]func(t *testing.T, env Env){
	"PipelineUpdates": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("p")
		for i, tc := range pipelineUpdateCases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := coll.InsertOne(ctx, append(D("_id", i), tc.start...))
				require.NoError(t, err)
				opts := options.UpdateOne()
				if tc.let != nil {
					opts.SetLet(tc.let)
				}
				res, err := coll.UpdateOne(ctx, D("_id", i), tc.update, opts)
				require.NoError(t, err)
				require.Equal(t, int64(1), res.MatchedCount)
				require.Equal(t, tc.modified, res.ModifiedCount)
				got := findAll(t, coll, D("_id", i), options.Find().SetProjection(D("_id", 0)))
				require.Len(t, got, 1)
				requireJSON(t, tc.want, got[0])
			})
		}
	},
	"PipelineUpsertAndFindAndModify": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("p")
		opts := options.UpdateOne().SetUpsert(true).SetLet(D("new_v", 1, "new_a", "first"))
		res, err := coll.UpdateOne(ctx, D("_id", "k"), A(D("$set", D("a", "$$new_a", "_v", "$$new_v"))), opts)
		require.NoError(t, err)
		require.Equal(t, "k", res.UpsertedID)
		requireJSON(t, `[{"_id":"k","a":"first","_v":1}]`, findAll(t, coll, D()))
		var got bson.D
		err = coll.FindOneAndUpdate(ctx, D("_id", "k"), versionGuard(),
			options.FindOneAndUpdate().SetLet(D("new_v", 2, "new_a", "second")).SetReturnDocument(options.After)).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":"k","a":"second","_v":2}`, got)
		_, err = coll.UpdateMany(ctx, D(), A(D("$set", D("at", "$$NOW"))))
		require.NoError(t, err)
		raw, err := coll.FindOne(ctx, D("_id", "k")).Raw()
		require.NoError(t, err)
		require.Equal(t, bson.TypeDateTime, raw.Lookup("at").Type)
	},
	"PipelineUpdateErrors": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("p")
		_, err := coll.InsertOne(ctx, D("_id", 1, "a", 1))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$match", D("a", 1))))
		requireCode(t, err, 72)
		require.Contains(t, err.Error(), "$match is not allowed to be used within an update")
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$frob", D())))
		requireCode(t, err, 40324)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$set", D("_id", 2))))
		requireCode(t, err, 66)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$set", D("b", "$$nope"))))
		requireCode(t, err, 17276)
		requireJSON(t, `[{"_id":1,"a":1}]`, findAll(t, coll, D()))
	},
	"ArrayFilters": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("af")
		for i, tc := range arrayFilterCases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := coll.InsertOne(ctx, append(D("_id", i), tc.start...))
				require.NoError(t, err)
				_, err = coll.UpdateOne(ctx, D("_id", i), tc.update, options.UpdateOne().SetArrayFilters(tc.filters))
				require.NoError(t, err)
				got := findAll(t, coll, D("_id", i), options.Find().SetProjection(D("_id", 0)))
				require.Len(t, got, 1)
				requireJSON(t, tc.want, got[0])
			})
		}
	},
	"ArrayFiltersManyAndFindAndModify": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("af")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "g", A(1, 7)), D("_id", 2, "g", A(8, 2))})
		require.NoError(t, err)
		res, err := coll.UpdateMany(ctx, D(), D("$mul", D("g.$[big]", 10)), options.UpdateMany().SetArrayFilters([]any{D("big", D("$gt", 5))}))
		require.NoError(t, err)
		require.Equal(t, int64(2), res.ModifiedCount)
		var got bson.D
		err = coll.FindOneAndUpdate(ctx, D("_id", 1), D("$set", D("g.$[one]", -1)),
			options.FindOneAndUpdate().SetArrayFilters([]any{D("one", 1)}).SetReturnDocument(options.After)).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":1,"g":[-1,70]}`, got)
		requireJSON(t, `[{"_id":2,"g":[80,2]}]`, findAll(t, coll, D("_id", 2)))
	},
	"ArrayFilterErrors": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("af")
		_, err := coll.InsertOne(ctx, D("_id", 1, "arr", A(1, 2), "s", 5))
		require.NoError(t, err)
		update := func(u bson.D, filters ...any) error {
			_, err := coll.UpdateOne(ctx, D("_id", 1), u, options.UpdateOne().SetArrayFilters(filters))
			return err
		}
		requireCode(t, update(D("$set", D("arr.$[x]", 0))), 2)                       // no filter for x
		requireCode(t, update(D("$set", D("arr.$[x]", 0)), D("x", 1), D("y", 2)), 9) // y unused
		requireCode(t, update(D("$set", D("arr.$[x]", 0)), D("x", 1), D("x", 2)), 9) // x twice
		requireCode(t, update(D("$set", D("arr.$[x]", 0)), D("x", 1, "y", 1)), 9)    // two identifiers
		requireCode(t, update(D("$set", D("s.$[x]", 0)), D("x", 1)), 2)              // not an array
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$set", D("a", 1))), options.UpdateOne().SetArrayFilters([]any{D("x", 1)}))
		require.Error(t, err, "arrayFilters with a pipeline update")
		var ce mongo.ServerError
		require.ErrorAs(t, err, &ce)
		requireJSON(t, `[{"_id":1,"arr":[1,2],"s":5}]`, findAll(t, coll, D()))
	},
}
