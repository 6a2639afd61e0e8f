package mongotest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// activations turns failCommand off and returns how often it has fired in the
// deployment's lifetime.
func (f *faultEnv) activations(t *testing.T) int64 {
	t.Helper()
	var res struct {
		Count int64 `bson:"count"`
	}
	err := f.env.DB.Client().Database("admin").RunCommand(ctxFor(t), D("configureFailPoint", "failCommand", "mode", "off")).Decode(&res)
	require.NoError(t, err)
	return res.Count
}

// requireFired asserts that failCommand fired exactly n times since before.
func (f *faultEnv) requireFired(t *testing.T, before int64, n int) {
	t.Helper()
	require.Equal(t, before+int64(n), f.activations(t), "failCommand activations")
}

func counterValue(t *testing.T, coll *mongo.Collection, id any) int32 {
	t.Helper()
	var got struct {
		N int32 `bson:"n"`
	}
	require.NoError(t, coll.FindOne(ctxFor(t), D("_id", id)).Decode(&got))
	return got.N
}

// retryCases inject one retryable error into a write; the driver retries it and the
// write applies exactly once, also where the first attempt had applied (write concern
// errors) and the retry is answered from the server's record of it.
var retryCases = []struct {
	name  string
	data  bson.D
	write func(ctx context.Context, coll *mongo.Collection) error
}{
	{"insert failed with a retryable code", D("failCommands", A("insert"), "errorCode", 91), func(ctx context.Context, coll *mongo.Collection) error {
		_, err := coll.InsertOne(ctx, D("_id", "new"))
		if err == nil {
			_, err = coll.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)))
		}
		return err
	}},
	{"update on a dropped connection", D("failCommands", A("update"), "closeConnection", true), func(ctx context.Context, coll *mongo.Collection) error {
		_, err := coll.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)))
		return err
	}},
	{"update applied, then a retryable write concern error", D("failCommands", A("update"), "writeConcernError", D("code", 91, "errmsg", "Replication is being shut down")), func(ctx context.Context, coll *mongo.Collection) error {
		_, err := coll.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)))
		return err
	}},
	{"findAndModify applied, then a retryable write concern error", D("failCommands", A("findAndModify"), "writeConcernError", D("code", 189, "errmsg", "stepped down")), func(ctx context.Context, coll *mongo.Collection) error {
		return coll.FindOneAndUpdate(ctx, D("_id", "counter"), D("$inc", D("n", 1))).Err()
	}},
	{"upsert failed with a retryable code", D("failCommands", A("update"), "errorCode", 10107), func(ctx context.Context, coll *mongo.Collection) error {
		_, err := coll.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)), options.UpdateOne().SetUpsert(true))
		return err
	}},
}

var faultTests = map[string]func(t *testing.T, env Env){
	"RetryableWriteAppliesOnce": func(t *testing.T, env Env) {
		for _, tc := range retryCases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFaultEnv(t, env, func(o *options.ClientOptions) { o.SetRetryWrites(true) })
				ctx := ctxFor(t)
				coll := env.DB.Collection("c")
				_ = coll.Drop(ctx)
				_, err := coll.InsertOne(ctx, D("_id", "counter", "n", int32(0)))
				require.NoError(t, err)
				before := f.activations(t)
				f.set(t, times(1), tc.data)
				require.NoError(t, tc.write(ctx, f.db.Collection("c")))
				f.requireFired(t, before, 1)
				require.Equal(t, int32(1), counterValue(t, coll, "counter"))
			})
		}
	},
	"TransactionRetriedCommitsOnce": func(t *testing.T, env Env) {
		cases := []struct {
			name     string
			data     bson.D
			attempts int
		}{
			{"transient error on a statement", D("failCommands", A("insert"), "errorCode", 112), 2},
			{"transient label on a statement", D("failCommands", A("update"), "errorCode", 2, "errorLabels", A("TransientTransactionError")), 2},
			{"retryable error on commit", D("failCommands", A("commitTransaction"), "errorCode", 91), 1},
			{"connection dropped on commit", D("failCommands", A("commitTransaction"), "closeConnection", true), 1},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFaultEnv(t, env)
				ctx := ctxFor(t)
				coll := env.DB.Collection("c")
				_ = coll.Drop(ctx)
				_, err := coll.InsertOne(ctx, D("_id", "counter", "n", int32(0)))
				require.NoError(t, err)
				before := f.activations(t)
				f.set(t, times(1), tc.data)
				sess, err := f.client.StartSession()
				require.NoError(t, err)
				defer sess.EndSession(ctx)
				attempts := 0
				fc := f.db.Collection("c")
				_, err = sess.WithTransaction(ctx, func(sctx context.Context) (any, error) {
					attempts++
					if _, err := fc.UpdateOne(sctx, D("_id", "counter"), D("$inc", D("n", 1))); err != nil {
						return nil, err
					}
					_, err := fc.InsertOne(sctx, D("attempt", attempts))
					return nil, err
				})
				require.NoError(t, err)
				f.requireFired(t, before, 1)
				require.Equal(t, tc.attempts, attempts)
				require.Equal(t, int32(1), counterValue(t, coll, "counter"))
				require.Equal(t, int64(2), count(t, ctx, coll, D()))
			})
		}
	},
	"UnsatisfiableWriteConcern": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("c")
		require.NoError(t, env.DB.CreateCollection(ctx, "c"))
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction(options.Transaction().SetWriteConcern(&writeconcern.WriteConcern{W: 5})))
		_, err = coll.InsertOne(mongo.NewSessionContext(ctx, sess), D("_id", 1))
		require.NoError(t, err)
		// the driver reports a commit's write concern error as a command error
		err = sess.CommitTransaction(ctx)
		requireCode(t, err, 100)
		require.Equal(t, "UnsatisfiableWriteConcern", commandError(t, err).Name)
		require.Equal(t, int64(1), count(t, ctx, coll, D()), "the commit applied; only its replication is unsatisfied")

		// the same outside transactions, and for a tag set the replica set does not have
		_, err = coll.InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)
		var we mongo.WriteException
		w5 := coll.Database().Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: 5}))
		_, err = w5.InsertOne(ctx, D("_id", 3))
		require.ErrorAs(t, err, &we)
		require.Equal(t, 100, we.WriteConcernError.Code)
		tag := coll.Database().Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: "nosuchtag"}))
		_, err = tag.DeleteOne(ctx, D("_id", 3))
		require.ErrorAs(t, err, &we)
		require.Equal(t, 79, we.WriteConcernError.Code)
		require.Equal(t, int64(2), count(t, ctx, coll, D()))
	},
	// failCommand fails a getMore before it checks out its cursor, so MongoDB (4.4+) does
	// not know it continues a change stream and adds no ResumableChangeStreamError: the
	// driver does not resume (the specifications' change-streams-resume-errorLabels test).
	// failGetMoreAfterCursorCheckout, which MongoDB labels, is in failpoints.go.
	"ChangeStreamDoesNotResumeAfterFailCommandOnGetMore": func(t *testing.T, env Env) {
		f := newFaultEnv(t, env)
		ctx := ctxFor(t)
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, f.db.Collection("cs"), nil)
		coll := env.DB.Collection("cs")
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		requireJSON(t, `{"_id":1}`, next(t, cs).DocumentKey)
		before := f.activations(t)
		f.set(t, times(1), D("failCommands", A("getMore"), "errorCode", 6))
		_, err = coll.InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)
		require.False(t, cs.Next(ctx))
		requireCode(t, cs.Err(), 6)
		require.NotContains(t, labelsOf(cs.Err()), "ResumableChangeStreamError")
		f.requireFired(t, before, 1)
	},
	"ChangeStreamSurfacesNonResumableError": func(t *testing.T, env Env) {
		cases := []struct {
			name  string
			code  int
			label string
		}{
			{"ChangeStreamFatalError", 280, "NonResumableChangeStreamError"},
			{"an error without a resumable label", 2, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFaultEnv(t, env)
				ctx := ctxFor(t)
				_ = env.DB.CreateCollection(ctx, "cs")
				cs := watch(t, f.db.Collection("cs"), nil)
				f.set(t, times(1), D("failCommands", A("getMore"), "errorCode", tc.code))
				_, err := env.DB.Collection("cs").InsertOne(ctx, D("x", 1))
				require.NoError(t, err)
				require.False(t, cs.Next(ctx))
				requireCode(t, cs.Err(), tc.code)
				if tc.label != "" {
					require.Contains(t, labelsOf(cs.Err()), tc.label)
				} else {
					require.Empty(t, labelsOf(cs.Err()))
				}
			})
		}
	},
}
