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
			"a", D("$getField", D("field", D("$literal", "$a"))),
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

func init() {
	fidelityTests["OutReplacesTheTarget"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		src, dst := env.DB.Collection("src"), env.DB.Collection("dst")
		_, err := src.InsertMany(ctx, []any{D("_id", 1, "x", 1), D("_id", 2, "x", 2), D("_id", 3, "x", 3)})
		require.NoError(t, err)
		_, err = dst.InsertOne(ctx, D("_id", "old"))
		require.NoError(t, err)
		out := aggregate(t, src, A(D("$match", D("x", D("$gte", 2))), D("$project", D("y", "$x")), D("$out", "dst")))
		require.Empty(t, out, "$out returns no documents")
		requireJSON(t, `[{"_id":2,"y":2},{"_id":3,"y":3}]`, findAll(t, dst, D(), options.Find().SetSort(D("_id", 1))))
		_, err = src.Aggregate(ctx, A(D("$out", "dst"), D("$match", D())))
		requireCode(t, err, 40601) // $out must be last
		_, err = src.Aggregate(ctx, A(D("$project", D("_id", 0)), D("$addFields", D("_id", 1)), D("$out", "dst")))
		requireCode(t, err, 11000)
		requireJSON(t, `[{"_id":2,"y":2},{"_id":3,"y":3}]`, findAll(t, dst, D(), options.Find().SetSort(D("_id", 1))))
	}
	fidelityTests["MergeIntoACollection"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		src, dst := env.DB.Collection("src"), env.DB.Collection("dst")
		_, err := src.InsertMany(ctx, []any{D("_id", 1, "x", 10), D("_id", 2, "x", 20)})
		require.NoError(t, err)
		_, err = dst.InsertMany(ctx, []any{D("_id", 1, "x", 1, "keep", true), D("_id", 9, "x", 9)})
		require.NoError(t, err)
		aggregate(t, src, A(D("$merge", D("into", "dst"))))
		requireJSON(t, `[{"_id":1,"x":10,"keep":true},{"_id":2,"x":20},{"_id":9,"x":9}]`, findAll(t, dst, D(), options.Find().SetSort(D("_id", 1))))
		aggregate(t, src, A(D("$merge", D("into", "dst", "whenMatched", "replace", "whenNotMatched", "discard"))))
		requireJSON(t, `[{"_id":1,"x":10},{"_id":2,"x":20},{"_id":9,"x":9}]`, findAll(t, dst, D(), options.Find().SetSort(D("_id", 1))))
		aggregate(t, src, A(D("$merge", D("into", "dst", "whenMatched", A(D("$set", D("x", D("$add", A("$x", "$$new.x")))))))))
		requireJSON(t, `[{"_id":1,"x":20},{"_id":2,"x":40},{"_id":9,"x":9}]`, findAll(t, dst, D(), options.Find().SetSort(D("_id", 1))))
		_, err = src.Aggregate(ctx, A(D("$merge", D("into", "dst", "whenMatched", "fail"))))
		requireCode(t, err, 11000)
		_, err = src.Aggregate(ctx, A(D("$merge", D("into", "dst", "on", "x"))))
		requireCode(t, err, 51183) // "on" needs a unique index
	}
	fidelityTests["DocumentsStage"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		cur, err := env.DB.Aggregate(ctx, A(D("$documents", A(D("a", 1), D("a", 2))), D("$match", D("a", 2))))
		require.NoError(t, err)
		var out []bson.D
		require.NoError(t, cur.All(ctx, &out))
		requireJSON(t, `[{"a":2}]`, out)
		_, err = env.DB.Aggregate(ctx, A(D("$documents", A(D("_id", 2, "x", 1))), D("$merge", D("into", "m", "whenMatched", "fail"))))
		require.NoError(t, err)
		_, err = env.DB.Aggregate(ctx, A(D("$documents", A(D("_id", 2, "x", 1))), D("$merge", D("into", "m", "whenMatched", "fail"))))
		requireCode(t, err, 11000)
		ce := commandError(t, err)
		requireJSON(t, `{"_id":1}`, ce.Raw.Lookup("keyPattern").Document())
		requireJSON(t, `{"_id":2}`, ce.Raw.Lookup("keyValue").Document())
	}
	fidelityTests["ArrayChangesInUpdateDescription"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1, "array", A("foo", D("a", "bar"), 1, 2, 3)))
		require.NoError(t, err)
		cs := watch(t, coll, nil)
		_, err = coll.UpdateOne(ctx, D("_id", 1), A(D("$set", D("array", A("foo", D("a", "bar"))))))
		require.NoError(t, err)
		ev := next(t, cs)
		requireJSON(t, `{"updatedFields":{},"removedFields":[],"truncatedArrays":[{"field":"array","newSize":2}]}`, ev.raw.Lookup("updateDescription").Document())
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$push", D("array", 4)))
		require.NoError(t, err)
		ev = next(t, cs)
		requireJSON(t, `{"updatedFields":{"array.2":4},"removedFields":[],"truncatedArrays":[]}`, ev.raw.Lookup("updateDescription").Document())
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("array.1.a", "baz")))
		require.NoError(t, err)
		ev = next(t, cs)
		requireJSON(t, `{"updatedFields":{"array.1.a":"baz"},"removedFields":[],"truncatedArrays":[]}`, ev.raw.Lookup("updateDescription").Document())
	}
	fidelityTests["ShowExpandedEvents"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		db := env.DB
		plain := watch(t, db, nil)
		expanded := watch(t, db, nil, options.ChangeStream().SetShowExpandedEvents(true))
		require.NoError(t, db.CreateCollection(ctx, "c"))
		coll := db.Collection("c")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("x", 1), Options: options.Index().SetName("x_1")})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 1, "a", D("1", 1)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("a.1", 2)))
		require.NoError(t, err)
		require.NoError(t, db.RunCommand(ctx, D("collMod", "c")).Err())
		require.NoError(t, coll.Indexes().DropOne(ctx, "x_1"))
		require.NoError(t, db.CreateCollection(ctx, "d"))
		require.NoError(t, rename(t, env, "c", "d", true))

		ops := []string{}
		var uuid bson.Raw
		for i := 0; i < 8; i++ {
			ev := next(t, expanded)
			ops = append(ops, ev.OperationType)
			u, err := ev.raw.LookupErr("collectionUUID")
			require.NoError(t, err, "event %s has collectionUUID", ev.OperationType)
			switch ev.OperationType {
			case "create":
				if uuid == nil {
					uuid = bson.Raw(u.Value)
					requireJSON(t, `{"idIndex":{"v":2,"key":{"_id":1},"name":"_id_"}}`, ev.raw.Lookup("operationDescription").Document())
				}
			case "createIndexes", "dropIndexes":
				requireJSON(t, `{"indexes":[{"v":2,"key":{"x":1},"name":"x_1"}]}`, ev.raw.Lookup("operationDescription").Document())
			case "update":
				requireJSON(t, `{"a.1":["a","1"]}`, ev.raw.Lookup("updateDescription", "disambiguatedPaths").Document())
			case "rename":
				desc := ev.raw.Lookup("operationDescription").Document()
				require.Equal(t, db.Name(), desc.Lookup("to", "db").StringValue())
				require.Equal(t, "d", desc.Lookup("to", "coll").StringValue())
				_, err := desc.LookupErr("dropTarget")
				require.NoError(t, err, "the dropped target's UUID")
			}
		}
		require.Equal(t, []string{"create", "createIndexes", "insert", "update", "modify", "dropIndexes", "create", "rename"}, ops)
		for _, want := range []string{"insert", "update", "rename"} {
			ev := next(t, plain)
			require.Equal(t, want, ev.OperationType, "streams without showExpandedEvents see no DDL events")
			_, err := ev.raw.LookupErr("collectionUUID")
			require.Error(t, err, "nor collectionUUID")
		}
	}
}

func init() {
	fidelityTests["SimpleCollation"] = func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		simple := &options.Collation{Locale: "simple"}
		require.NoError(t, env.DB.CreateCollection(ctx, "c", options.CreateCollection().SetCollation(simple)))
		coll := env.DB.Collection("c")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("s", 1), Options: options.Index().SetName("s_1").SetCollation(simple)})
		require.NoError(t, err)
		_, err = coll.InsertMany(ctx, []any{D("_id", 1, "s", "b"), D("_id", 2, "s", "B"), D("_id", 3, "s", "a")})
		require.NoError(t, err)
		// binary comparison: upper case sorts first, and "b" does not match "B"
		got := findAll(t, coll, D("s", D("$gte", "a")), options.Find().SetCollation(simple).SetSort(D("s", 1)))
		require.Equal(t, []any{int32(3), int32(1)}, ids(got))
		res, err := coll.UpdateMany(ctx, D("s", "b"), D("$set", D("u", true)), options.UpdateMany().SetCollation(simple))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.ModifiedCount)
		n, err := coll.CountDocuments(ctx, D("s", "B"), options.Count().SetCollation(simple))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		out := aggregate(t, coll, A(D("$sort", D("s", 1)), D("$project", D("s", 1))), options.Aggregate().SetCollation(simple))
		requireJSON(t, `[{"_id":2,"s":"B"},{"_id":3,"s":"a"},{"_id":1,"s":"b"}]`, out)
		del, err := coll.DeleteOne(ctx, D("s", "a"), options.DeleteOne().SetCollation(simple))
		require.NoError(t, err)
		require.Equal(t, int64(1), del.DeletedCount)
	}
}
