package mongotest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The fail points besides failCommand that jetbus's fault handling is tested with:
// failGetMoreAfterCursorCheckout (a getMore failing after it checked out its cursor, as
// a change stream's getMore does when the primary steps down or the network fails) and
// onPrimaryTransactionalWrite (a retryable write failing at, or losing its reply after,
// the point where it is recorded). Both are deployment-wide, so the tests hold
// failPointMu through newFaultEnv and turn them off when they end.

// setNamed configures the named fail point and turns it off when the test ends.
func (f *faultEnv) setNamed(t *testing.T, name string, mode any, data bson.D) {
	t.Helper()
	cmd := D("configureFailPoint", name, "mode", mode)
	if data != nil {
		cmd = append(cmd, bson.E{Key: "data", Value: data})
	}
	admin := f.env.DB.Client().Database("admin")
	require.NoError(t, admin.RunCommand(ctxFor(t), cmd).Err())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.RunCommand(ctx, D("configureFailPoint", name, "mode", "off")).Err(); err != nil {
			t.Errorf("turn %s off: %v", name, err)
		}
	})
}

var moreFailPointCases = []struct {
	name  string
	opts  []func(*options.ClientOptions)
	check func(t *testing.T, f *faultEnv)
}{
	{"failGetMoreAfterCursorCheckout fails the getMore and destroys the cursor", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		coll := f.env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1), D("_id", 2), D("_id", 3)})
		require.NoError(t, err)
		var first struct {
			Cursor struct {
				ID int64 `bson:"id"`
			} `bson:"cursor"`
		}
		require.NoError(t, f.db.RunCommand(ctx, D("find", "c", "batchSize", 1)).Decode(&first))
		require.NotZero(t, first.Cursor.ID)
		f.setNamed(t, "failGetMoreAfterCursorCheckout", times(1), D("errorCode", 6, "appName", f.appName))
		err = f.db.RunCommand(ctx, D("getMore", first.Cursor.ID, "collection", "c")).Err()
		requireCode(t, err, 6)
		ce := commandError(t, err)
		require.Equal(t, "HostUnreachable", ce.Name)
		require.NotContains(t, ce.Labels, "ResumableChangeStreamError", "a find cursor is not a change stream")
		err = f.db.RunCommand(ctx, D("getMore", first.Cursor.ID, "collection", "c")).Err()
		requireCode(t, err, 43) // CursorNotFound: the failed getMore destroyed it
	}},
	{"failGetMoreAfterCursorCheckout without errorCode fails with InternalError", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		coll := f.env.DB.Collection("c")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1), D("_id", 2)})
		require.NoError(t, err)
		cur, err := f.db.Collection("c").Find(ctx, D(), options.Find().SetBatchSize(1))
		require.NoError(t, err)
		defer func() { _ = cur.Close(context.Background()) }()
		f.setNamed(t, "failGetMoreAfterCursorCheckout", times(1), D("appName", f.appName))
		require.True(t, cur.Next(ctx))
		require.False(t, cur.Next(ctx))
		requireCode(t, cur.Err(), 1)
	}},
	{"a change stream resumes after a getMore fails with a resumable error", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		coll := f.env.DB.Collection("c")
		cs := watch(t, f.db.Collection("c"), nil)
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		require.Equal(t, D("_id", int32(1)), next(t, cs).DocumentKey)
		f.setNamed(t, "failGetMoreAfterCursorCheckout", times(1), D("errorCode", 6, "appName", f.appName))
		_, err = coll.InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)
		require.Equal(t, D("_id", int32(2)), next(t, cs).DocumentKey, "the driver resumed after the last event and missed none")
		_, err = coll.InsertOne(ctx, D("_id", 3))
		require.NoError(t, err)
		require.Equal(t, D("_id", int32(3)), next(t, cs).DocumentKey)
	}},
	{"a change stream's getMore error carries ResumableChangeStreamError", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		var res struct {
			Cursor struct {
				ID int64 `bson:"id"`
			} `bson:"cursor"`
		}
		require.NoError(t, f.db.RunCommand(ctx, D("aggregate", "c", "pipeline", A(D("$changeStream", D())), "cursor", D())).Decode(&res))
		require.NotZero(t, res.Cursor.ID)
		f.setNamed(t, "failGetMoreAfterCursorCheckout", times(1), D("errorCode", 89, "appName", f.appName))
		err := f.db.RunCommand(ctx, D("getMore", res.Cursor.ID, "collection", "c", "maxTimeMS", 50)).Err()
		requireCode(t, err, 89)
		require.Contains(t, labelsOf(err), "ResumableChangeStreamError")
	}},
	{"a change stream does not resume after a non-resumable getMore error", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		cs := watch(t, f.db.Collection("c"), nil)
		f.setNamed(t, "failGetMoreAfterCursorCheckout", times(1), D("errorCode", 2, "appName", f.appName))
		_, err := f.env.DB.Collection("c").InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		ctx2, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.False(t, cs.Next(ctx2))
		requireCode(t, cs.Err(), 2)
	}},
	{"onPrimaryTransactionalWrite loses the reply of an applied retryable write", []func(*options.ClientOptions){func(o *options.ClientOptions) { o.SetRetryWrites(true) }}, func(t *testing.T, f *faultEnv) {
		ctx := context.Background() // no deadline: the driver retries a write once
		coll := f.db.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", "counter", "n", 0))
		require.NoError(t, err)
		f.setNamed(t, "onPrimaryTransactionalWrite", times(1), nil)
		res, err := coll.UpdateOne(ctx, D("_id", "counter"), D("$inc", D("n", 1)))
		require.NoError(t, err, "the driver retried on the closed connection")
		require.Equal(t, int64(1), res.ModifiedCount, "the retry returns the recorded result")
		require.Equal(t, int32(1), counterValue(t, f.env.DB.Collection("c"), "counter"), "applied exactly once")
	}},
	{"onPrimaryTransactionalWrite with failBeforeCommitExceptionCode does not apply the write", []func(*options.ClientOptions){func(o *options.ClientOptions) { o.SetRetryWrites(true) }}, func(t *testing.T, f *faultEnv) {
		ctx := context.Background()
		coll := f.db.Collection("c")
		f.setNamed(t, "onPrimaryTransactionalWrite", times(2), D("failBeforeCommitExceptionCode", 1))
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.Error(t, err)
		require.True(t, mongo.IsNetworkError(err), "the connection was closed on both attempts: %v", err)
		require.Zero(t, count(t, ctx, f.env.DB.Collection("c"), D()), "neither attempt was reflected")
		f.setNamed(t, "onPrimaryTransactionalWrite", times(1), D("failBeforeCommitExceptionCode", 1))
		_, err = coll.InsertOne(ctx, D("_id", 2))
		require.NoError(t, err, "the retry succeeds")
		require.Equal(t, int64(1), count(t, ctx, f.env.DB.Collection("c"), D()))
	}},
	{"onPrimaryTransactionalWrite with closeConnection false fails with the code", []func(*options.ClientOptions){func(o *options.ClientOptions) { o.SetRetryWrites(true) }}, func(t *testing.T, f *faultEnv) {
		ctx := context.Background()
		f.setNamed(t, "onPrimaryTransactionalWrite", times(1), D("failBeforeCommitExceptionCode", 2, "closeConnection", false))
		_, err := f.db.Collection("c").InsertOne(ctx, D("_id", 1))
		var we mongo.WriteException
		var ce mongo.CommandError
		switch {
		case errors.As(err, &we) && len(we.WriteErrors) == 1:
			require.Equal(t, 2, we.WriteErrors[0].Code)
		case errors.As(err, &ce):
			require.Equal(t, int32(2), ce.Code)
		default:
			t.Fatalf("want error code 2, got %v", err)
		}
		require.Zero(t, count(t, ctx, f.env.DB.Collection("c"), D()))
	}},
	{"a bulk write retried after a server-labelled retryable error applies once", []func(*options.ClientOptions){func(o *options.ClientOptions) { o.SetRetryWrites(true) }}, func(t *testing.T, f *faultEnv) {
		ctx := context.Background()
		coll := f.db.Collection("c")
		_, err := coll.InsertOne(ctx, D("_id", "counter", "n", 0))
		require.NoError(t, err)
		f.set(t, times(1), D("failCommands", A("update"), "errorCode", 189))
		res, err := coll.BulkWrite(ctx, []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(D("_id", 2)),
			mongo.NewUpdateOneModel().SetFilter(D("_id", "counter")).SetUpdate(D("$inc", D("n", 1))),
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), res.InsertedCount)
		require.Equal(t, int64(1), res.ModifiedCount)
		require.Equal(t, int32(1), counterValue(t, f.env.DB.Collection("c"), "counter"))
		f.set(t, times(2), D("failCommands", A("insert"), "errorCode", 189))
		_, err = coll.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(D("_id", 3))})
		requireCode(t, err, 189)
		require.Contains(t, labelsOf(err), "RetryableWriteError", "the server labels PrimarySteppedDown on a retryable write")
	}},
	{"blockConnection on commitTransaction: the retried commit applies once", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		coll := f.db.Collection("c")
		require.NoError(t, f.env.DB.CreateCollection(ctx, "c"))
		f.set(t, times(1), D("failCommands", A("commitTransaction"), "blockConnection", true, "blockTimeMS", 400))
		sess, err := f.client.StartSession()
		require.NoError(t, err)
		defer sess.EndSession(context.Background())
		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		_, err = coll.InsertOne(sctx, D("_id", 1))
		require.NoError(t, err)
		start := time.Now()
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err = sess.CommitTransaction(short)
		cancel()
		require.Error(t, err, "the commit outlived the caller's deadline")
		require.Less(t, time.Since(start), 400*time.Millisecond, "the driver gave up before the server unblocked")
		require.NoError(t, sess.CommitTransaction(ctx), "retrying the commit succeeds")
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "the blocked commit held the retry or the retry found it committed")
		require.Equal(t, int64(1), count(t, ctx, f.env.DB.Collection("c"), D("_id", 1)))
	}},
}

func init() {
	failPointTests["OtherFailPoints"] = func(t *testing.T, env Env) {
		for _, tc := range moreFailPointCases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFaultEnv(t, env, tc.opts...)
				_ = f.env.DB.Collection("c").Drop(ctxFor(t))
				tc.check(t, f)
			})
		}
	}
}
