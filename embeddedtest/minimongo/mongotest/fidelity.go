package mongotest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// fidelityTests cover behaviours of MongoDB 7.0 found missing by running MongoDB's unified
// specification tests against the backend (issue 26): let variables in every command that
// takes them, $setField/$getField/$unsetField, snapshot reads outside transactions,
// showExpandedEvents, $merge and $out, collation simple.
var fidelityTests = map[string]func(t *testing.T, env Env){
	"LetInFind": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "x", 1), D("_id", 2, "x", 2), D("_id", 3, "x", 3)})
		require.NoError(t, err)
		got := findAll(t, coll, D("$expr", D("$gte", A("$x", "$$min"))), options.Find().SetLet(D("min", 2)))
		require.Equal(t, []any{int32(2), int32(3)}, ids(got))
		got = findAll(t, coll, D("$expr", D("$eq", A("$_id", "$$id"))), options.Find().SetLet(D("id", 3)).SetLimit(-1))
		requireJSON(t, `[{"_id":3,"x":3}]`, got)
	},
	"LetInAggregate": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "x", 1), D("_id", 2, "x", 2)})
		require.NoError(t, err)
		out := aggregate(t, coll, A(
			D("$match", D("$expr", D("$eq", A("$x", "$$want")))),
			D("$project", D("_id", 1, "label", "$$label", "sum", D("$add", A("$x", "$$want")))),
		), options.Aggregate().SetLet(D("want", 2, "label", "two")))
		requireJSON(t, `[{"_id":2,"label":"two","sum":4}]`, out)
	},
	"LetInUpdateAndDelete": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "x", 1), D("_id", 2, "x", 2), D("_id", 3, "x", 3)})
		require.NoError(t, err)
		res, err := coll.UpdateOne(ctx, D("$expr", D("$eq", A("$_id", "$$id"))), A(D("$set", D("x", "$$v"))),
			options.UpdateOne().SetLet(D("id", 1, "v", "new")))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.ModifiedCount)
		del, err := coll.DeleteMany(ctx, D("$expr", D("$gt", A("$x", "$$limit"))), options.DeleteMany().SetLet(D("limit", 1)))
		require.NoError(t, err)
		// "new" sorts after numbers, so it is greater than 1 as well
		require.Equal(t, int64(3), del.DeletedCount)
		fam := coll.FindOneAndUpdate(ctx, D("$expr", D("$eq", A("$_id", "$$id"))), D("$set", D("x", 1)),
			options.FindOneAndUpdate().SetLet(D("id", 9)).SetUpsert(true).SetReturnDocument(options.After))
		var doc bson.D
		require.NoError(t, fam.Decode(&doc))
		require.Len(t, findAll(t, coll, D()), 1, "the upsert inserted the document")
	},
	"LetRefusesBadNames": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		_, err := env.DB.Collection("c").Find(ctx, D(), options.Find().SetLet(D("Upper", 1)))
		requireCode(t, err, 16870)
	},
	"SetField": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1, "foo", D()))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$replaceWith", D("$setField", D("field", D("$literal", "$a"), "value", 1, "input", "$$ROOT")))))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$set", D("foo", D("$setField", D("field", D("$literal", "a.b"), "value", 2, "input", "$foo"))))))
		require.NoError(t, err)
		var doc bson.D
		require.NoError(t, coll.FindOne(ctx, D("_id", 1)).Decode(&doc))
		requireJSON(t, `{"_id":1,"foo":{"a.b":2},"$a":1}`, doc)
		out := aggregate(t, coll, A(D("$project", D("_id", 0,
			"a", D("$getField", D("$literal", "$a")),
			"ab", D("$getField", D("field", "a.b", "input", "$foo")),
			"gone", D("$unsetField", D("field", "a.b", "input", "$foo")),
			"removed", D("$setField", D("field", "a.b", "input", "$foo", "value", "$$REMOVE")),
			"null", D("$setField", D("field", "x", "input", "$missing", "value", 1)),
		))))
		requireJSON(t, `[{"a":1,"ab":2,"gone":{},"removed":{},"null":null}]`, out)
		_, err = coll.Aggregate(ctx, A(D("$project", D("x", D("$setField", D("field", "$a", "input", "$$ROOT", "value", 1))))))
		requireCode(t, err, 4161106) // field must be a constant string, not a field path
		_, err = coll.Aggregate(ctx, A(D("$project", D("x", D("$setField", D("field", "a", "input", 5, "value", 1))))))
		requireCode(t, err, 4161105)
	},
}

func init() {
	fidelityTests["SnapshotReadsOutsideTransactions"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1, "x", "a"))
		require.NoError(t, err)
		sess, err := env.DB.Client().StartSession(options.Session().SetSnapshot(true))
		require.NoError(t, err)
		defer sess.EndSession(context.Background())
		sctx := mongo.NewSessionContext(ctx, sess)
		require.Len(t, findAll(t, coll, D()), 1)
		cur, err := coll.Find(sctx, D())
		require.NoError(t, err)
		var first []bson.D
		require.NoError(t, cur.All(sctx, &first))
		require.Len(t, first, 1)
		require.NotZero(t, sess.SnapshotTime().T, "the server reported atClusterTime")

		// writes after the snapshot are not seen by the session's later reads
		_, err = coll.InsertOne(ctx, D("_id", 2, "x", "b"))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("x", "changed")))
		require.NoError(t, err)
		cur, err = coll.Find(sctx, D())
		require.NoError(t, err)
		var again []bson.D
		require.NoError(t, cur.All(sctx, &again))
		requireJSON(t, `[{"_id":1,"x":"a"}]`, again)
		cur, err = coll.Aggregate(sctx, A(D("$match", D())))
		require.NoError(t, err)
		var agg []bson.D
		require.NoError(t, cur.All(sctx, &agg))
		requireJSON(t, `[{"_id":1,"x":"a"}]`, agg)
		var vals []string
		require.NoError(t, coll.Distinct(sctx, "x", D()).Decode(&vals))
		require.Equal(t, []string{"a"}, vals)
		require.Len(t, findAll(t, coll, D()), 2, "reads outside the session see the latest state")

		// writes are not snapshot reads
		err = env.DB.RunCommand(ctx, D("insert", "c", "documents", A(D("_id", 3)), "readConcern", D("level", "snapshot"))).Err()
		require.Error(t, err)
		// a snapshot in the future is refused
		future := bson.Timestamp{T: uint32(time.Now().Add(time.Hour).Unix()), I: 1}
		err = env.DB.RunCommand(ctx, D("find", "c", "readConcern", D("level", "snapshot", "atClusterTime", future))).Err()
		require.Error(t, err)
	}
}
