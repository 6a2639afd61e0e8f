package mongotest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func count(t *testing.T, ctx context.Context, coll *mongo.Collection, filter any) int64 {
	t.Helper()
	n, err := coll.CountDocuments(ctx, filter)
	require.NoError(t, err)
	return n
}

var txnTests = map[string]func(t *testing.T, env Env){
	"KillSessionsAbortsItsTransaction": killSessionsAbortsTransaction,
	"ConcurrentTransactions": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", "counter", "n", 0))
		require.NoError(t, err)
		cs := watch(t, coll, A(D("$match", D("operationType", "update"))))
		const workers, rounds = 4, 10
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			go func(w int) {
				sess, err := env.DB.Client().StartSession()
				if err != nil {
					errs <- err
					return
				}
				defer sess.EndSession(ctx)
				for i := 0; i < rounds; i++ {
					_, err := sess.WithTransaction(ctx, func(sctx context.Context) (any, error) {
						if _, err := coll.UpdateOne(sctx, D("_id", "counter"), D("$inc", D("n", 1))); err != nil {
							return nil, err
						}
						_, err := coll.InsertOne(sctx, D("w", w, "i", i))
						return nil, err
					})
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}(w)
		}
		for w := 0; w < workers; w++ {
			require.NoError(t, <-errs)
		}
		var got struct {
			N int `bson:"n"`
		}
		require.NoError(t, coll.FindOne(ctx, D("_id", "counter")).Decode(&got))
		require.Equal(t, workers*rounds, got.N)
		require.Equal(t, int64(workers*rounds+1), count(t, ctx, coll, D()))
		for i := 0; i < workers*rounds; i++ {
			ev := next(t, cs)
			require.Equal(t, "update", ev.OperationType)
		}
		requireNoEvent(t, cs)
	},
	"CommitAndAbort": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		a, b := env.DB.Collection("a"), env.DB.Collection("b")
		require.NoError(t, env.DB.CreateCollection(ctx, "a"))
		require.NoError(t, env.DB.CreateCollection(ctx, "b"))
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
			if _, err := a.InsertOne(ctx, D("_id", 1)); err != nil {
				return nil, err
			}
			_, err := b.InsertOne(ctx, D("_id", 1))
			return nil, err
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), count(t, ctx, a, D()))
		require.Equal(t, int64(1), count(t, ctx, b, D()))

		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		_, err = a.InsertOne(sctx, D("_id", 2))
		require.NoError(t, err)
		_, err = a.DeleteOne(sctx, D("_id", 1))
		require.NoError(t, err)
		require.Equal(t, int64(0), count(t, sctx, a, D("_id", 1)))
		_, err = env.DB.Collection("new").InsertOne(sctx, D("_id", 1))
		require.NoError(t, err)
		require.NoError(t, sess.AbortTransaction(ctx))
		got := findAll(t, a, D())
		requireJSON(t, `[{"_id":1}]`, got)
		names, err := env.DB.ListCollectionNames(ctx, D("name", "new"))
		require.NoError(t, err)
		require.Empty(t, names, "a collection created by an aborted transaction does not exist")
	},
	"SnapshotIsolation": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "v", 1), D("_id", 2, "v", 1)})
		require.NoError(t, err)
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		// the first read establishes the snapshot
		require.Equal(t, int64(2), count(t, sctx, coll, D()))
		_, err = coll.UpdateOne(sctx, D("_id", 1), D("$set", D("v", 2)))
		require.NoError(t, err)
		_, err = coll.InsertOne(sctx, D("_id", 3, "v", 2))
		require.NoError(t, err)
		// writes from outside after the snapshot are invisible inside
		_, err = coll.InsertOne(ctx, D("_id", 4, "v", 1))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 2), D("$set", D("v", 9)))
		require.NoError(t, err)
		inside := findAll(t, coll, D(), options.Find().SetSort(D("_id", 1)))
		requireJSON(t, `[{"_id":1,"v":1},{"_id":2,"v":9},{"_id":4,"v":1}]`, inside)
		var own []bson.D
		cur, err := coll.Find(sctx, D(), options.Find().SetSort(D("_id", 1)))
		require.NoError(t, err)
		require.NoError(t, cur.All(sctx, &own))
		requireJSON(t, `[{"_id":1,"v":2},{"_id":2,"v":1},{"_id":3,"v":2}]`, own)
		agg, err := coll.Aggregate(sctx, A(D("$group", D("_id", nil, "s", D("$sum", "$v")))))
		require.NoError(t, err)
		var sum []bson.D
		require.NoError(t, agg.All(sctx, &sum))
		requireJSON(t, `[{"_id":null,"s":5}]`, sum)
		require.NoError(t, sess.CommitTransaction(ctx))
		got := findAll(t, coll, D(), options.Find().SetSort(D("_id", 1)))
		requireJSON(t, `[{"_id":1,"v":2},{"_id":2,"v":9},{"_id":3,"v":2},{"_id":4,"v":1}]`, got)
	},
	"WriteConflict": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1, "v", 0))
		require.NoError(t, err)
		s1, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer s1.EndSession(ctx)
		s2, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer s2.EndSession(ctx)
		require.NoError(t, s1.StartTransaction())
		require.NoError(t, s2.StartTransaction())
		c1, c2 := mongo.NewSessionContext(ctx, s1), mongo.NewSessionContext(ctx, s2)
		_, err = coll.UpdateOne(c1, D("_id", 1), D("$inc", D("v", 1)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(c2, D("_id", 1), D("$inc", D("v", 10)))
		requireCode(t, err, 112)
		var le mongo.LabeledError
		require.True(t, errors.As(err, &le))
		require.True(t, le.HasErrorLabel("TransientTransactionError"))
		require.NoError(t, s1.CommitTransaction(ctx))
		err = s2.CommitTransaction(ctx)
		requireCode(t, err, 251)
		got := findAll(t, coll, D())
		requireJSON(t, `[{"_id":1,"v":1}]`, got)
	},
	"WithTransactionRetriesConflicts": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 1, "v", 0))
		require.NoError(t, err)
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		attempts := 0
		_, err = sess.WithTransaction(ctx, func(sctx context.Context) (any, error) {
			attempts++
			if err := coll.FindOne(sctx, D("_id", 1)).Err(); err != nil {
				return nil, err
			}
			if attempts == 1 {
				// a concurrent write after the snapshot makes the update conflict
				if _, err := coll.UpdateOne(ctx, D("_id", 1), D("$inc", D("v", 100))); err != nil {
					return nil, err
				}
			}
			_, err := coll.UpdateOne(sctx, D("_id", 1), D("$inc", D("v", 1)))
			return nil, err
		})
		require.NoError(t, err)
		require.Equal(t, 2, attempts)
		requireJSON(t, `[{"_id":1,"v":101}]`, findAll(t, coll, D()))
	},
	"CommitRetryIsIdempotent": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		d := &replyDropper{}
		c := newClient(t, env, options.Client().SetDialer(d))
		coll := c.Database(env.DB.Name()).Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", 0, "n", 0))
		require.NoError(t, err)
		sess, err := c.StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		_, err = coll.InsertOne(sctx, D("_id", 1))
		require.NoError(t, err)
		_, err = coll.UpdateOne(sctx, D("_id", 0), D("$inc", D("n", 1)))
		require.NoError(t, err)
		d.arm("commitTransaction")
		require.NoError(t, sess.CommitTransaction(ctx))
		require.Equal(t, 1, d.count())
		got := findAll(t, env.DB.Collection("c"), D(), options.Find().SetSort(D("_id", 1)))
		requireJSON(t, `[{"_id":0,"n":1},{"_id":1}]`, got)
	},
	"DDLInvisibleUntilCommit": func(t *testing.T, env Env) {
		for _, commit := range []bool{false, true} {
			name := map[bool]string{false: "abort", true: "commit"}[commit]
			t.Run(name, func(t *testing.T) {
				ctx := ctxFor(t)
				sess, err := env.DB.Client().StartSession()
				require.NoError(t, err)
				defer sess.EndSession(ctx)
				require.NoError(t, sess.StartTransaction())
				sctx := mongo.NewSessionContext(ctx, sess)
				explicit, implicit := "explicit_"+name, "implicit_"+name
				require.NoError(t, env.DB.CreateCollection(sctx, explicit))
				_, err = env.DB.Collection(explicit).Indexes().CreateOne(sctx, mongo.IndexModel{Keys: D("k", 1), Options: options.Index().SetUnique(true)})
				require.NoError(t, err)
				_, err = env.DB.Collection(explicit).InsertOne(sctx, D("_id", 1, "k", "a"))
				require.NoError(t, err)
				_, err = env.DB.Collection(explicit).InsertOne(sctx, D("_id", 2, "k", "a"))
				require.True(t, mongo.IsDuplicateKeyError(err), "the index created in the transaction applies in it: %v", err)
				require.NoError(t, sess.AbortTransaction(ctx))

				require.NoError(t, sess.StartTransaction())
				require.NoError(t, env.DB.CreateCollection(sctx, explicit))
				_, err = env.DB.Collection(explicit).Indexes().CreateOne(sctx, mongo.IndexModel{Keys: D("k", 1), Options: options.Index().SetUnique(true)})
				require.NoError(t, err)
				_, err = env.DB.Collection(implicit).InsertOne(sctx, D("_id", 1))
				require.NoError(t, err)
				require.Equal(t, int64(1), count(t, sctx, env.DB.Collection(implicit), D()))

				// invisible outside before the transaction ends
				names, err := env.DB.ListCollectionNames(ctx, D("name", D("$in", A(explicit, implicit))))
				require.NoError(t, err)
				require.Empty(t, names)
				require.Zero(t, count(t, ctx, env.DB.Collection(implicit), D()))

				if !commit {
					require.NoError(t, sess.AbortTransaction(ctx))
					names, err = env.DB.ListCollectionNames(ctx, D("name", D("$in", A(explicit, implicit))))
					require.NoError(t, err)
					require.Empty(t, names, "nothing is left behind by an aborted transaction")
					require.NoError(t, env.DB.CreateCollection(ctx, explicit))
					specs, err := env.DB.Collection(explicit).Indexes().ListSpecifications(ctx)
					require.NoError(t, err)
					require.Len(t, specs, 1, "only the _id index")
					return
				}
				require.NoError(t, sess.CommitTransaction(ctx))
				names, err = env.DB.ListCollectionNames(ctx, D("name", D("$in", A(explicit, implicit))))
				require.NoError(t, err)
				require.ElementsMatch(t, []string{explicit, implicit}, names)
				specs, err := env.DB.Collection(explicit).Indexes().ListSpecifications(ctx)
				require.NoError(t, err)
				require.Len(t, specs, 2)
				require.Equal(t, int64(1), count(t, ctx, env.DB.Collection(implicit), D()))
			})
		}
	},
	"IndexOnExistingCollectionRefused": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		require.NoError(t, env.DB.CreateCollection(ctx, "c"))
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction())
		_, err = env.DB.Collection("c").Indexes().CreateOne(mongo.NewSessionContext(ctx, sess), mongo.IndexModel{Keys: D("k", 1)})
		requireCode(t, err, 263)
		_ = sess.AbortTransaction(ctx)
	},
	"DuplicateKeyAbortsTransaction": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("k", 1), Options: options.Index().SetUnique(true)})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 1, "k", "a"))
		require.NoError(t, err)
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		_, err = coll.InsertOne(sctx, D("_id", 2, "k", "b"))
		require.NoError(t, err)
		_, err = coll.InsertOne(sctx, D("_id", 3, "k", "b"))
		require.True(t, mongo.IsDuplicateKeyError(err), "%v", err)
		requireCode(t, sess.CommitTransaction(ctx), 251)
		require.Equal(t, int64(1), count(t, ctx, coll, D()))
	},
}

// killSessionsAbortsTransaction: killSessions aborts the open transaction of a session (a
// client that died mid-transaction), so another transaction may write the documents it held
// at once instead of conflicting until the transaction lifetime ends; the killed session's
// commit then fails with NoSuchTransaction.
func killSessionsAbortsTransaction(t *testing.T, env Env) {
	ctx := ctxFor(t)
	coll := env.DB.Collection("k")
	_, err := coll.InsertOne(ctx, D("_id", "held", "n", 0))
	require.NoError(t, err)
	dead, err := env.DB.Client().StartSession()
	require.NoError(t, err)
	defer dead.EndSession(ctx)
	require.NoError(t, dead.StartTransaction())
	_, err = coll.UpdateOne(mongo.NewSessionContext(ctx, dead), D("_id", "held"), D("$inc", D("n", 1)))
	require.NoError(t, err)

	other, err := env.DB.Client().StartSession()
	require.NoError(t, err)
	defer other.EndSession(ctx)
	require.NoError(t, other.StartTransaction())
	_, err = coll.UpdateOne(mongo.NewSessionContext(ctx, other), D("_id", "held"), D("$inc", D("n", 10)))
	requireCode(t, err, 112)
	_ = other.AbortTransaction(ctx)

	require.NoError(t, env.DB.Client().Database("admin").RunCommand(ctx, D("killSessions", A(D("id", dead.ID().Lookup("id"))))).Err())

	require.NoError(t, other.StartTransaction())
	_, err = coll.UpdateOne(mongo.NewSessionContext(ctx, other), D("_id", "held"), D("$inc", D("n", 10)))
	require.NoError(t, err)
	require.NoError(t, other.CommitTransaction(ctx))
	err = dead.CommitTransaction(ctx)
	requireCode(t, err, 251)
	var got struct {
		N int `bson:"n"`
	}
	require.NoError(t, coll.FindOne(ctx, D("_id", "held")).Decode(&got))
	require.Equal(t, 10, got.N)
}
