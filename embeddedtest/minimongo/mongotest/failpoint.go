package mongotest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// failCommand is one fail point per deployment, so the tests that configure it take
// turns; each scopes it to a client of its own by application name, so the tests running
// beside it are not affected.
var (
	failPointMu  sync.Mutex
	failPointSeq atomic.Int64
)

// faultEnv is a client that failCommand fail points configured through it affect alone.
type faultEnv struct {
	env     Env
	client  *mongo.Client
	appName string
	db      *mongo.Database // env.DB as seen by client
}

// newFaultEnv connects a client with an application name unique to the test and holds the
// deployment's failCommand fail point until the test ends. Against a deployment without
// test commands (enableTestCommands) the test is skipped.
func newFaultEnv(t *testing.T, env Env, opts ...func(*options.ClientOptions)) *faultEnv {
	t.Helper()
	failPointMu.Lock()
	t.Cleanup(failPointMu.Unlock)
	name := fmt.Sprintf("mongotest-fault-%d", failPointSeq.Add(1))
	o := options.Client().ApplyURI(env.URI).SetAppName(name)
	for _, f := range opts {
		f(o)
	}
	c, err := mongo.Connect(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	f := &faultEnv{env: env, client: c, appName: name, db: c.Database(env.DB.Name())}
	err = f.configure(ctxFor(t), "off", nil)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == 59 {
		t.Skip("the deployment has no configureFailPoint: start it with enableTestCommands=1")
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.configure(ctx, "off", nil); err != nil {
			t.Errorf("turn failCommand off: %v", err)
		}
	})
	return f
}

func (f *faultEnv) configure(ctx context.Context, mode any, data bson.D) error {
	cmd := D("configureFailPoint", "failCommand", "mode", mode)
	if data != nil {
		cmd = append(cmd, bson.E{Key: "data", Value: data})
	}
	return f.env.DB.Client().Database("admin").RunCommand(ctx, cmd).Err()
}

// set configures failCommand for the fault client's commands.
func (f *faultEnv) set(t *testing.T, mode any, data bson.D) {
	t.Helper()
	data = append(D("appName", f.appName), data...)
	require.NoError(t, f.configure(ctxFor(t), mode, data))
}

func times(n int) bson.D { return D("times", n) }

func noRetryReads(o *options.ClientOptions)  { o.SetRetryReads(false) }
func noRetryWrites(o *options.ClientOptions) { o.SetRetryWrites(false) }

func ping(ctx context.Context, db *mongo.Database) error {
	return db.RunCommand(ctx, D("ping", 1)).Err()
}

func labelsOf(err error) []string {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Labels
	}
	var we mongo.WriteException
	if errors.As(err, &we) {
		return we.Labels
	}
	return nil
}

// failCommandCases observe each mode and field of failCommand as MongoDB documents it.
var failCommandCases = []struct {
	name  string
	opts  []func(*options.ClientOptions)
	check func(t *testing.T, f *faultEnv)
}{
	{"errorCode alwaysOn fails only the listed commands until off", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, "alwaysOn", D("failCommands", A("ping"), "errorCode", 91))
		for i := 0; i < 3; i++ {
			err := ping(ctx, f.db)
			requireCode(t, err, 91)
			ce := commandError(t, err)
			require.Equal(t, "ShutdownInProgress", ce.Name)
			require.Equal(t, "Failing command via 'failCommand' failpoint", ce.Message)
		}
		require.NoError(t, f.db.RunCommand(ctx, D("buildInfo", 1)).Err())
		require.NoError(t, ping(ctx, f.env.DB), "a client of another application name is not affected")
		require.NoError(t, f.configure(ctx, "off", nil))
		require.NoError(t, ping(ctx, f.db))
	}},
	{"times counts only listed commands", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(2), D("failCommands", A("ping"), "errorCode", 2))
		require.NoError(t, f.db.RunCommand(ctx, D("buildInfo", 1)).Err())
		requireCode(t, ping(ctx, f.db), 2)
		requireCode(t, ping(ctx, f.db), 2)
		require.NoError(t, ping(ctx, f.db))
	}},
	{"skip lets the first commands through", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, D("skip", 2), D("failCommands", A("ping"), "errorCode", 2))
		require.NoError(t, ping(ctx, f.db))
		require.NoError(t, ping(ctx, f.db))
		requireCode(t, ping(ctx, f.db), 2)
		requireCode(t, ping(ctx, f.db), 2)
	}},
	{"count reports earlier activations", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		admin := f.env.DB.Client().Database("admin")
		f.set(t, times(5), D("failCommands", A("ping"), "errorCode", 2))
		var before struct {
			Count int64 `bson:"count"`
		}
		require.NoError(t, admin.RunCommand(ctx, D("configureFailPoint", "failCommand", "mode", "off")).Decode(&before))
		f.set(t, times(2), D("failCommands", A("ping"), "errorCode", 2))
		requireCode(t, ping(ctx, f.db), 2)
		requireCode(t, ping(ctx, f.db), 2)
		var after struct {
			Count int64 `bson:"count"`
		}
		require.NoError(t, admin.RunCommand(ctx, D("configureFailPoint", "failCommand", "mode", "off")).Decode(&after))
		require.Equal(t, before.Count+2, after.Count)
	}},
	{"aliases and configureFailPoint itself", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, "alwaysOn", D("failCommands", A("dropIndexes", "configureFailPoint"), "errorCode", 2))
		requireCode(t, f.db.RunCommand(ctx, D("deleteIndexes", "c", "index", "*")).Err(), 2)
		require.NoError(t, f.client.Database("admin").RunCommand(ctx, D("configureFailPoint", "failCommand", "mode", "off")).Err())
	}},
	{"server labels a retryable write error", []func(*options.ClientOptions){func(o *options.ClientOptions) { o.SetRetryWrites(true) }}, func(t *testing.T, f *faultEnv) {
		// Without a deadline the driver retries a write once; with one it retries until
		// the deadline, so this context has none.
		ctx := context.Background()
		f.set(t, times(2), D("failCommands", A("insert"), "errorCode", 91))
		_, err := f.db.Collection("c").InsertOne(ctx, D("x", 1))
		requireCode(t, err, 91)
		require.Contains(t, labelsOf(err), "RetryableWriteError", "the retry failed too: the driver returns an error with the label")
		require.Zero(t, count(t, ctx, f.env.DB.Collection("c"), D()))
	}},
	{"no label without a retryable write", []func(*options.ClientOptions){noRetryWrites}, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(1), D("failCommands", A("insert"), "errorCode", 91))
		_, err := f.db.Collection("c").InsertOne(ctx, D("x", 1))
		requireCode(t, err, 91)
		require.Empty(t, labelsOf(err))
	}},
	{"errorLabels replace the server's", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(1), D("failCommands", A("insert"), "errorCode", 91, "errorLabels", A("Foo")))
		_, err := f.db.Collection("c").InsertOne(ctx, D("x", 1))
		requireCode(t, err, 91)
		require.Equal(t, []string{"Foo"}, labelsOf(err), "without RetryableWriteError the driver does not retry")
		f.set(t, times(1), D("failCommands", A("insert"), "errorCode", 91, "errorLabels", A()))
		_, err = f.db.Collection("c").InsertOne(ctx, D("x", 2))
		requireCode(t, err, 91)
		require.Empty(t, labelsOf(err))
		require.Zero(t, count(t, ctx, f.env.DB.Collection("c"), D()))
	}},
	{"closeConnection drops the connection", []func(*options.ClientOptions){noRetryReads}, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(1), D("failCommands", A("find"), "closeConnection", true))
		err := f.db.Collection("c").FindOne(ctx, D()).Err()
		require.True(t, mongo.IsNetworkError(err), "want a network error, got %v", err)
		require.ErrorIs(t, f.db.Collection("c").FindOne(ctx, D()).Err(), mongo.ErrNoDocuments)
	}},
	{"blockConnection delays the command", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(1), D("failCommands", A("ping"), "blockConnection", true, "blockTimeMS", 300))
		start := time.Now()
		require.NoError(t, ping(ctx, f.db))
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		f.set(t, times(1), D("failCommands", A("ping"), "blockConnection", true, "blockTimeMS", 200, "errorCode", 2))
		start = time.Now()
		requireCode(t, ping(ctx, f.db), 2)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		f.set(t, times(1), D("failCommands", A("ping"), "blockConnection", true))
		requireCode(t, ping(ctx, f.db), 72) // blockTimeMS is missing
	}},
	{"appName scopes the fail point", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		err := f.configure(ctx, "alwaysOn", D("failCommands", A("ping"), "errorCode", 2, "appName", "some other application"))
		require.NoError(t, err)
		require.NoError(t, ping(ctx, f.db))
		f.set(t, "alwaysOn", D("failCommands", A("ping"), "errorCode", 2))
		requireCode(t, ping(ctx, f.db), 2)
	}},
	{"failInternalCommands leaves client commands failing", nil, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		f.set(t, times(1), D("failCommands", A("ping"), "errorCode", 2, "failInternalCommands", true))
		requireCode(t, ping(ctx, f.db), 2)
	}},
	{"writeConcernError after the write", []func(*options.ClientOptions){noRetryWrites}, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		wce := D("code", 64, "codeName", "WriteConcernFailed", "errmsg", "waiting for replication timed out", "errInfo", D("wtimeout", true))
		f.set(t, times(1), D("failCommands", A("ping", "insert"), "writeConcernError", wce))
		require.NoError(t, ping(ctx, f.db), "ping takes no write concern and does not count")
		_, err := f.db.Collection("c").InsertOne(ctx, D("_id", 1))
		var we mongo.WriteException
		require.ErrorAs(t, err, &we)
		require.NotNil(t, we.WriteConcernError)
		require.Equal(t, 64, we.WriteConcernError.Code)
		require.Equal(t, "waiting for replication timed out", we.WriteConcernError.Message)
		require.Equal(t, int64(1), count(t, ctx, f.env.DB.Collection("c"), D()), "the write itself applied")
		_, err = f.db.Collection("c").InsertOne(ctx, D("_id", 2))
		require.NoError(t, err, "times: 1 is used up")
	}},
	{"writeConcernError with labels", []func(*options.ClientOptions){noRetryWrites}, func(t *testing.T, f *faultEnv) {
		ctx := ctxFor(t)
		wce := D("code", 12345, "errmsg", "hello")
		f.set(t, times(1), D("failCommands", A("insert"), "writeConcernError", wce, "errorLabels", A("Foo", "Bar")))
		_, err := f.db.Collection("c").InsertOne(ctx, D("_id", 1))
		var we mongo.WriteException
		require.ErrorAs(t, err, &we)
		require.Equal(t, 12345, we.WriteConcernError.Code)
		require.Equal(t, []string{"Foo", "Bar"}, labelsOf(err))
	}},
}

var failPointTests = map[string]func(t *testing.T, env Env){
	"FailCommand": func(t *testing.T, env Env) {
		for _, tc := range failCommandCases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFaultEnv(t, env, tc.opts...)
				_ = f.env.DB.Collection("c").Drop(ctxFor(t))
				tc.check(t, f)
			})
		}
	},
}
