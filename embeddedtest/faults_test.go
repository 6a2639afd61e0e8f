package embeddedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
)

func counter(t *testing.T, coll *mongo.Collection) int32 {
	t.Helper()
	var got struct {
		N int32 `bson:"n"`
	}
	require.NoError(t, coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: "c"}}).Decode(&got))
	return got.N
}

func incr(ctx context.Context, coll *mongo.Collection) error {
	_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "c"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int32(1)}}}})
	return err
}

func requireCode(t *testing.T, err error, code int) {
	t.Helper()
	var se mongo.ServerError
	require.ErrorAs(t, err, &se)
	require.True(t, se.HasErrorCode(code), "want code %d, got %v", code, err)
}

func TestInjectMongoFault(t *testing.T) {
	cases := []struct {
		name  string
		check func(t *testing.T, coll *mongo.Collection)
	}{
		{"fail the next updates with a code", func(t *testing.T, coll *mongo.Collection) {
			ctx := context.Background()
			embeddedtest.FailMongoCommands(t, coll.Database().Client(), 2, 2, "update")
			requireCode(t, incr(ctx, coll), 2)
			requireCode(t, incr(ctx, coll), 2)
			require.NoError(t, incr(ctx, coll))
			assert.Equal(t, int32(1), counter(t, coll))
		}},
		{"a retryable code is retried and applies once", func(t *testing.T, coll *mongo.Collection) {
			embeddedtest.FailMongoCommands(t, coll.Database().Client(), 1, 11600, "update")
			require.NoError(t, incr(context.Background(), coll))
			assert.Equal(t, int32(1), counter(t, coll))
		}},
		{"drop connections", func(t *testing.T, coll *mongo.Collection) {
			embeddedtest.DropMongoConnections(t, coll.Database().Client(), 1, "update")
			require.NoError(t, incr(context.Background(), coll), "the driver retries a write on a new connection")
			assert.Equal(t, int32(1), counter(t, coll))
		}},
		{"block for a while", func(t *testing.T, coll *mongo.Collection) {
			embeddedtest.BlockMongoCommands(t, coll.Database().Client(), 300*time.Millisecond, 1, "update")
			start := time.Now()
			require.NoError(t, incr(context.Background(), coll))
			assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		}},
		{"write concern error after the write", func(t *testing.T, coll *mongo.Collection) {
			embeddedtest.InjectMongoFault(t, coll.Database().Client(), embeddedtest.MongoFault{
				Commands:          []string{"update"},
				Times:             1,
				WriteConcernError: &embeddedtest.MongoWriteConcernError{Code: 64, Message: "waiting for replication timed out"},
			})
			var we mongo.WriteException
			require.ErrorAs(t, incr(context.Background(), coll), &we)
			require.NotNil(t, we.WriteConcernError)
			assert.Equal(t, 64, we.WriteConcernError.Code)
			assert.Equal(t, int32(1), counter(t, coll), "the update applied")
		}},
		{"skip, labels and app name", func(t *testing.T, coll *mongo.Collection) {
			ctx := context.Background()
			c, err := mongo.Connect(options.Client().ApplyURI(embeddedtest.MongoURI(t)).SetAppName("under-test"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
			mine := c.Database(coll.Database().Name()).Collection(coll.Name())
			embeddedtest.InjectMongoFault(t, coll.Database().Client(), embeddedtest.MongoFault{
				Commands: []string{"update"}, Skip: 1, Code: 91, Labels: []string{}, AppName: "under-test",
			})
			require.NoError(t, incr(ctx, mine))
			err = incr(ctx, mine)
			requireCode(t, err, 91)
			var le mongo.LabeledError
			require.ErrorAs(t, err, &le)
			assert.False(t, le.HasErrorLabel("RetryableWriteError"), "the labels were replaced, so the driver did not retry")
			require.NoError(t, incr(ctx, coll), "another application's client is not affected")
			assert.Equal(t, int32(2), counter(t, coll))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			coll := embeddedtest.Mongo(t).Collection("faults")
			_, err := coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: int32(0)}})
			require.NoError(t, err)
			tc.check(t, coll)
		})
	}
}

func TestInjectMongoFaultEndsWithTheTest(t *testing.T) {
	db := embeddedtest.Mongo(t)
	ping := func() error { return db.RunCommand(context.Background(), bson.D{{Key: "ping", Value: 1}}).Err() }
	t.Run("inject", func(t *testing.T) {
		embeddedtest.InjectMongoFault(t, db.Client(), embeddedtest.MongoFault{Commands: []string{"ping"}, Code: 2})
		requireCode(t, ping(), 2)
	})
	require.NoError(t, ping(), "the fault is turned off when the test that injected it ends")
}

func TestMongoFaultRefusesFaultsThatDoNothing(t *testing.T) {
	db := embeddedtest.Mongo(t)
	cases := map[string]embeddedtest.MongoFault{
		"no commands":         {Code: 2},
		"no effect":           {Commands: []string{"ping"}},
		"times and skip":      {Commands: []string{"ping"}, Code: 2, Times: 1, Skip: 1},
		"negative repetition": {Commands: []string{"ping"}, Code: 2, Times: -1},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			ft := &fatalRecorder{TB: t}
			func() {
				defer func() { _ = recover() }()
				embeddedtest.InjectMongoFault(ft, db.Client(), f)
			}()
			assert.True(t, ft.failed, "InjectMongoFault accepted %+v", f)
		})
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (r *fatalRecorder) Fatalf(string, ...any) {
	r.failed = true
	panic(errors.New("fatal"))
}
