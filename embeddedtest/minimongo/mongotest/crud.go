package mongotest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var adminTests = map[string]func(t *testing.T, env Env){
	"Hello": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		var res bson.M
		require.NoError(t, env.DB.RunCommand(ctx, D("hello", 1)).Decode(&res))
		require.Equal(t, true, res["isWritablePrimary"])
		require.NotEmpty(t, res["setName"])
		require.NotEmpty(t, res["hosts"])
		require.NotNil(t, res["logicalSessionTimeoutMinutes"])
		require.NotNil(t, res["topologyVersion"])
		require.NotNil(t, res["$clusterTime"])
		require.NotNil(t, res["operationTime"])
		wire, ok := res["maxWireVersion"].(int32)
		require.True(t, ok)
		require.GreaterOrEqual(t, wire, int32(21))
		var legacy bson.M
		require.NoError(t, env.DB.RunCommand(ctx, D("isMaster", 1)).Decode(&legacy))
		require.Equal(t, true, legacy["ismaster"])
	},
	"PingAndBuildInfo": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		require.NoError(t, env.DB.Client().Ping(ctx, nil))
		var bi bson.M
		require.NoError(t, env.DB.RunCommand(ctx, D("buildInfo", 1)).Decode(&bi))
		require.IsType(t, "", bi["version"])
	},
	"CollectionsAndDatabases": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		require.NoError(t, env.DB.CreateCollection(ctx, "a"))
		requireCode(t, env.DB.CreateCollection(ctx, "a"), 48)
		_, err := env.DB.Collection("b").InsertOne(ctx, D("x", 1))
		require.NoError(t, err)
		names, err := env.DB.ListCollectionNames(ctx, D())
		require.NoError(t, err)
		slices.Sort(names)
		require.Equal(t, []string{"a", "b"}, names)
		specs, err := env.DB.ListCollectionSpecifications(ctx, D("name", "b"))
		require.NoError(t, err)
		require.Len(t, specs, 1)
		require.Equal(t, "collection", specs[0].Type)
		dbs, err := env.DB.Client().ListDatabaseNames(ctx, D("name", env.DB.Name()))
		require.NoError(t, err)
		require.Equal(t, []string{env.DB.Name()}, dbs)
		require.NoError(t, env.DB.Collection("a").Drop(ctx))
		require.NoError(t, env.DB.Collection("missing").Drop(ctx))
		names, err = env.DB.ListCollectionNames(ctx, D())
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, names)
		require.NoError(t, env.DB.Drop(ctx))
		dbs, err = env.DB.Client().ListDatabaseNames(ctx, D("name", env.DB.Name()))
		require.NoError(t, err)
		require.Empty(t, dbs)
		// dropping the last collection removes the database
		require.NoError(t, env.DB.CreateCollection(ctx, "only"))
		require.NoError(t, env.DB.Collection("only").Drop(ctx))
		dbs, err = env.DB.Client().ListDatabaseNames(ctx, D("name", env.DB.Name()))
		require.NoError(t, err)
		require.Empty(t, dbs)
	},
	"EndSessions": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		_, err = env.DB.Collection("c").InsertOne(mongo.NewSessionContext(ctx, sess), D("x", 1))
		require.NoError(t, err)
		sess.EndSession(ctx)
		c := newClient(t, env)
		require.NoError(t, c.Disconnect(ctx)) // sends endSessions for its pooled sessions
	},
}

var crudTests = map[string]func(t *testing.T, env Env){
	"InsertGeneratesObjectID": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		res, err := coll.InsertOne(ctx, D("a", 1))
		require.NoError(t, err)
		_, isOID := res.InsertedID.(bson.ObjectID)
		require.True(t, isOID)
		// A server-side generated _id is stored first.
		raw, err := coll.FindOne(ctx, D()).Raw()
		require.NoError(t, err)
		el, err := raw.IndexErr(0)
		require.NoError(t, err)
		require.Equal(t, "_id", el.Key())
		var got bson.D
		require.NoError(t, env.DB.RunCommand(ctx, D("insert", "c", "documents", A(D("b", 2)))).Decode(&got))
		docs := findAll(t, coll, D("b", 2))
		require.Len(t, docs, 1)
		require.Equal(t, "_id", docs[0][0].Key)
		require.IsType(t, bson.ObjectID{}, docs[0][0].Value)
	},
	"FindOptions": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		var docs []any
		for i := 0; i < 30; i++ {
			docs = append(docs, D("_id", int32(i), "g", int32(i%3), "sub", D("x", int32(i), "y", "s")))
		}
		_, err := coll.InsertMany(ctx, docs)
		require.NoError(t, err)
		got := findAll(t, coll, D("g", 1), options.Find().SetSort(D("_id", -1)).SetSkip(2).SetLimit(3))
		require.Equal(t, []any{int32(22), int32(19), int32(16)}, ids(got))
		got = findAll(t, coll, D("_id", D("$lt", 2)), options.Find().SetProjection(D("sub.x", 1)))
		requireJSON(t, `[{"_id":0,"sub":{"x":0}},{"_id":1,"sub":{"x":1}}]`, got)
		got = findAll(t, coll, D("_id", 2), options.Find().SetProjection(D("sub", 0, "_id", 0)))
		requireJSON(t, `[{"g":2}]`, got)
		got = findAll(t, coll, D("_id", 2), options.Find().SetProjection(D("_id", 0, "g", 1)))
		requireJSON(t, `[{"g":2}]`, got)
		_, err = coll.Find(ctx, D(), options.Find().SetProjection(D("g", 1, "sub", 0)))
		requireCode(t, err, 31254)
		// batchSize and getMore
		cur, err := coll.Find(ctx, D(), options.Find().SetBatchSize(4).SetSort(D("_id", 1)))
		require.NoError(t, err)
		require.Equal(t, 4, cur.RemainingBatchLength())
		require.NotZero(t, cur.ID())
		var all []bson.D
		require.NoError(t, cur.All(ctx, &all))
		require.Len(t, all, 30)
		// negative limit: a single batch and no cursor
		cur, err = coll.Find(ctx, D(), options.Find().SetLimit(-5))
		require.NoError(t, err)
		require.Zero(t, cur.ID())
		require.Equal(t, 5, cur.RemainingBatchLength())
		require.NoError(t, cur.Close(ctx))
		// FindOne, not found
		err = coll.FindOne(ctx, D("_id", 99)).Err()
		require.ErrorIs(t, err, mongo.ErrNoDocuments)
	},
	"KillCursors": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		for i := 0; i < 10; i++ {
			_, err := coll.InsertOne(ctx, D("_id", int32(i)))
			require.NoError(t, err)
		}
		cur, err := coll.Find(ctx, D(), options.Find().SetBatchSize(2))
		require.NoError(t, err)
		id := cur.ID()
		require.NotZero(t, id)
		require.NoError(t, cur.Close(ctx))
		err = env.DB.RunCommand(ctx, D("getMore", id, "collection", "c")).Err()
		requireCode(t, err, 43)
	},
	"UpdateCounts": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "a", 1), D("_id", 2, "a", 1), D("_id", 3, "a", 2)})
		require.NoError(t, err)
		res, err := coll.UpdateMany(ctx, D("a", 1), D("$set", D("b", true)))
		require.NoError(t, err)
		require.Equal(t, int64(2), res.MatchedCount)
		require.Equal(t, int64(2), res.ModifiedCount)
		res, err = coll.UpdateMany(ctx, D("a", 1), D("$set", D("b", true)))
		require.NoError(t, err)
		require.Equal(t, int64(2), res.MatchedCount)
		require.Equal(t, int64(0), res.ModifiedCount)
		res, err = coll.UpdateOne(ctx, D("a", 1), D("$inc", D("n", 1)))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.MatchedCount)
		res, err = coll.UpdateOne(ctx, D("a", 9), D("$set", D("x", 1)), options.UpdateOne().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int64(0), res.MatchedCount)
		require.Equal(t, int64(1), res.UpsertedCount)
		require.IsType(t, bson.ObjectID{}, res.UpsertedID)
		got := findAll(t, coll, D("a", 9), options.Find().SetProjection(D("_id", 0)))
		requireJSON(t, `[{"a":9,"x":1}]`, got)
		res, err = coll.ReplaceOne(ctx, D("_id", 3), D("z", 1))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.ModifiedCount)
		requireJSON(t, `[{"_id":3,"z":1}]`, findAll(t, coll, D("_id", 3)))
		res, err = coll.ReplaceOne(ctx, D("_id", 7), D("z", 7), options.Replace().SetUpsert(true))
		require.NoError(t, err)
		require.Equal(t, int32(7), res.UpsertedID)
		requireJSON(t, `[{"_id":7,"z":7}]`, findAll(t, coll, D("_id", 7)))
		_, err = coll.UpdateMany(ctx, D(), D("z", 1))
		require.Error(t, err) // the driver refuses replacement documents for updateMany
		err = env.DB.RunCommand(ctx, D("update", "c", "updates", A(D("q", D(), "u", D("z", 1), "multi", true)))).Err()
		requireCode(t, err, 9)
	},
	"Delete": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("a", 1), D("a", 1), D("a", 1), D("a", 2)})
		require.NoError(t, err)
		res, err := coll.DeleteOne(ctx, D("a", 1))
		require.NoError(t, err)
		require.Equal(t, int64(1), res.DeletedCount)
		res, err = coll.DeleteMany(ctx, D("a", 1))
		require.NoError(t, err)
		require.Equal(t, int64(2), res.DeletedCount)
		res, err = coll.DeleteMany(ctx, D("a", 1))
		require.NoError(t, err)
		require.Equal(t, int64(0), res.DeletedCount)
		n, err := coll.CountDocuments(ctx, D())
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		err = env.DB.RunCommand(ctx, D("delete", "c", "deletes", A(D("q", D(), "limit", 5)))).Err()
		requireCode(t, err, 9)
	},
	"FindAndModify": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "q", 1, "n", 5), D("_id", 2, "q", 1, "n", 3)})
		require.NoError(t, err)
		var got bson.D
		err = coll.FindOneAndUpdate(ctx, D("q", 1), D("$inc", D("n", 1)),
			options.FindOneAndUpdate().SetSort(D("n", 1)).SetReturnDocument(options.After)).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":2,"q":1,"n":4}`, got)
		err = coll.FindOneAndUpdate(ctx, D("_id", 1), D("$set", D("n", 0)),
			options.FindOneAndUpdate().SetProjection(D("n", 1, "_id", 0))).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"n":5}`, got)
		err = coll.FindOneAndUpdate(ctx, D("_id", 3), D("$set", D("n", 9)),
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":3,"n":9}`, got)
		err = coll.FindOneAndUpdate(ctx, D("_id", 4), D("$set", D("n", 9)), options.FindOneAndUpdate().SetUpsert(true)).Err()
		require.ErrorIs(t, err, mongo.ErrNoDocuments)
		err = coll.FindOneAndUpdate(ctx, D("_id", 40), D("$set", D("n", 9))).Err()
		require.ErrorIs(t, err, mongo.ErrNoDocuments)
		err = coll.FindOneAndReplace(ctx, D("_id", 3), D("r", 1), options.FindOneAndReplace().SetReturnDocument(options.After)).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":3,"r":1}`, got)
		err = coll.FindOneAndDelete(ctx, D("q", 1), options.FindOneAndDelete().SetSort(D("n", -1))).Decode(&got)
		require.NoError(t, err)
		requireJSON(t, `{"_id":2,"q":1,"n":4}`, got)
		var raw struct {
			LastErrorObject bson.D `bson:"lastErrorObject"`
		}
		require.NoError(t, env.DB.RunCommand(ctx, D("findAndModify", "c", "query", D("_id", 50), "update", D("$set", D("a", 1)), "upsert", true)).Decode(&raw))
		requireJSON(t, `{"n":1,"updatedExisting":false,"upserted":50}`, raw.LastErrorObject)
		err = env.DB.RunCommand(ctx, D("findAndModify", "c", "query", D(), "update", D("$set", D("a", 1)), "remove", true)).Err()
		requireCode(t, err, 9)
	},
	"CountAndDistinct": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("t", A("a", "b")), D("t", "b"), D("t", "c", "k", 1), D("x", 1)})
		require.NoError(t, err)
		n, err := coll.CountDocuments(ctx, D("t", "b"))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		n, err = coll.CountDocuments(ctx, D(), options.Count().SetSkip(1).SetLimit(2))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		n, err = coll.EstimatedDocumentCount(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
		var cnt bson.M
		require.NoError(t, env.DB.RunCommand(ctx, D("count", "c", "query", D("k", 1))).Decode(&cnt))
		require.EqualValues(t, 1, cnt["n"])
		res := coll.Distinct(ctx, "t", D())
		require.NoError(t, res.Err())
		var vals []string
		require.NoError(t, res.Decode(&vals))
		slices.Sort(vals)
		require.Equal(t, []string{"a", "b", "c"}, vals)
	},
	"BulkOrderedAndUnordered": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		models := []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(D("_id", 2)),
			mongo.NewInsertOneModel().SetDocument(D("_id", 1)),
			mongo.NewInsertOneModel().SetDocument(D("_id", 3)),
			mongo.NewUpdateOneModel().SetFilter(D("_id", 2)).SetUpdate(D("$set", D("x", 1))),
			mongo.NewUpdateOneModel().SetFilter(D("_id", 9)).SetUpdate(D("$set", D("x", 1))).SetUpsert(true),
			mongo.NewDeleteOneModel().SetFilter(D("_id", 3)),
		}
		res, err := coll.BulkWrite(ctx, models)
		var bwe mongo.BulkWriteException
		require.ErrorAs(t, err, &bwe)
		require.Len(t, bwe.WriteErrors, 1)
		require.Equal(t, 1, bwe.WriteErrors[0].Index)
		require.Equal(t, 11000, bwe.WriteErrors[0].Code)
		require.Equal(t, int64(1), res.InsertedCount)
		n, err := coll.CountDocuments(ctx, D())
		require.NoError(t, err)
		require.Equal(t, int64(2), n)

		_, err = coll.DeleteMany(ctx, D("_id", D("$ne", 1)))
		require.NoError(t, err)
		res, err = coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		require.ErrorAs(t, err, &bwe)
		require.Len(t, bwe.WriteErrors, 1)
		require.Equal(t, 1, bwe.WriteErrors[0].Index)
		require.Equal(t, int64(2), res.InsertedCount)
		require.Equal(t, int64(1), res.MatchedCount)
		require.Equal(t, int64(1), res.ModifiedCount)
		require.Equal(t, int64(1), res.UpsertedCount)
		require.Equal(t, int64(1), res.DeletedCount)
		require.Equal(t, map[int64]any{4: int32(9)}, res.UpsertedIDs)
		got := findAll(t, coll, D(), options.Find().SetSort(D("_id", 1)))
		requireJSON(t, `[{"_id":1},{"_id":2,"x":1},{"_id":9,"x":1}]`, got)
	},
	"RetryableWriteAppliesOnce": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		d := &replyDropper{}
		c := newClient(t, env, options.Client().SetDialer(d).SetRetryWrites(true))
		coll := c.Database(env.DB.Name()).Collection("c")
		require.NoError(t, c.Ping(ctx, nil))
		d.arm("insert")
		_, err := coll.InsertOne(ctx, D("x", 1))
		require.NoError(t, err)
		require.Equal(t, 1, d.count())
		d.arm("update")
		_, err = coll.UpdateOne(ctx, D("x", 1), D("$inc", D("n", 1)))
		require.NoError(t, err)
		d.arm("findAndModify")
		err = coll.FindOneAndUpdate(ctx, D("x", 1), D("$inc", D("n", 1))).Err()
		require.NoError(t, err)
		require.Equal(t, 3, d.count())
		got := findAll(t, env.DB.Collection("c"), D(), options.Find().SetProjection(D("_id", 0)))
		requireJSON(t, `[{"x":1,"n":2}]`, got)
	},
	"ConcurrentClients": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := env.DB.Collection("c")
				for i := 0; i < 25; i++ {
					if _, err := c.InsertOne(ctx, D("w", w, "i", i)); err != nil {
						errs <- err
						return
					}
					if _, err := c.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)), options.UpdateOne().SetUpsert(true)); err != nil {
						errs <- fmt.Errorf("upsert: %w", err)
						return
					}
					cur, err := c.Find(ctx, D("w", w), options.Find().SetBatchSize(3))
					if err != nil {
						errs <- err
						return
					}
					var docs []bson.D
					if err := cur.All(ctx, &docs); err != nil {
						errs <- err
						return
					}
					if len(docs) != i+1 {
						errs <- fmt.Errorf("worker %d saw %d docs, want %d", w, len(docs), i+1)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var counter bson.M
		require.NoError(t, coll.FindOne(ctx, D("_id", "counter")).Decode(&counter))
		require.EqualValues(t, 200, counter["n"])
	},
}
