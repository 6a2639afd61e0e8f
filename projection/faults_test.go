package projection_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/projection"
)

// faultApp is the application name of the projection's MongoDB client in fault tests: faults
// are scoped to it, so the test's own client still reaches the deployment.
const faultApp = "projection-under-test"

func faultOff(t *testing.T, client *mongo.Client) {
	t.Helper()
	err := client.Database("admin").RunCommand(context.Background(),
		bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err()
	require.NoError(t, err)
}

// TestMongoFaults: while MongoDB fails the projection's writes (or cannot be reached at all),
// nothing is acknowledged and nothing is dead-lettered; once it recovers, the projection
// catches up and the view holds every event.
func TestMongoFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault embeddedtest.MongoFault
	}{
		{"not writable primary", embeddedtest.MongoFault{Commands: []string{"update"}, Code: 10107}},
		{"write concern error", embeddedtest.MongoFault{Commands: []string{"update"},
			WriteConcernError: &embeddedtest.MongoWriteConcernError{Code: 64, Message: "waiting for replication timed out"}}},
		{"connections dropped", embeddedtest.MongoFault{Commands: []string{"update", "find"}, CloseConnection: true}},
		{"writes slower than the write timeout", embeddedtest.MongoFault{Commands: []string{"update"}, Block: 1500 * time.Millisecond}},
		{"unreachable", embeddedtest.MongoFault{Commands: []string{"hello", "isMaster", "ping", "update", "find", "insert", "createIndexes"}, CloseConnection: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "orders", 2)
			client, err := mongo.Connect(options.Client().ApplyURI(embeddedtest.MongoURI(t)).SetAppName(faultApp).
				SetServerSelectionTimeout(time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Disconnect(context.Background()) })

			const n = 200
			for i := range n {
				e.publish(fmt.Sprintf("k%d", i%50), fmt.Sprintf(`{"n":%d}`, i))
			}
			tc.fault.AppName = faultApp
			embeddedtest.InjectMongoFault(t, e.db.Client(), tc.fault)
			cfg := e.config("orders-view")
			cfg.AckTimeout, cfg.WriteTimeout = 2*time.Second, time.Second
			c, err := projection.NewChangelog(e.bus, client, e.q, cfg, projection.WithLogger(embeddedtest.Logger(t)))
			require.NoError(t, err)
			r := start(t, c.Run)

			// One and a half ack timeouts of failures: the deliveries are kept alive, none is
			// acknowledged.
			deadline := time.Now().Add(3 * cfg.AckTimeout / 2)
			for time.Now().Before(deadline) {
				cur, err := e.bus.Cursor(context.Background(), e.topic, "orders-view")
				if err == nil {
					for _, p := range cur.Partitions {
						require.Zero(t, p.AckFloor, "partition %d acknowledged while MongoDB fails", p.Partition)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			faultOff(t, e.db.Client())
			e.waitLag("orders-view", 30*time.Second)
			require.NoError(t, r.stop())
			docs := e.docs("view")
			require.Len(t, docs, 50)
			for k := range 50 {
				assert.Equal(t, int64(n-50+k), docs[fmt.Sprintf("k%d", k)]["n"], "k%d holds its last event", k)
			}
			assert.Empty(t, e.letters(), "nothing dead-lettered")
		})
	}
}

// TestLongWriteRetriesKeepDeliveries: MongoDB fails the projection's writes for several ack
// timeouts, long enough for the retry backoff to grow past the ack timeout. The batch being
// retried and the deliveries held behind it are kept alive the whole time: the server
// delivers none of them again, so none reaches MaxDeliver (which would hand it to the
// dead-letter queue while the projection still writes it), and once MongoDB recovers the
// view holds every event and every partition's ack floor reaches its last event.
func TestLongWriteRetriesKeepDeliveries(t *testing.T) {
	e := newEnv(t, "orders", 2)
	client := faultClient(t)
	nc := embeddedtest.Connect(t, e.url)
	advisories, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>")
	require.NoError(t, err)
	var redelivered atomic.Int64
	for i := range 200 {
		e.publish(fmt.Sprintf("k%d", i%50), fmt.Sprintf(`{"n":%d}`, i))
	}
	embeddedtest.InjectMongoFault(t, e.db.Client(), embeddedtest.MongoFault{Commands: []string{"update"}, Code: 10107, AppName: faultApp})
	cfg := e.config("orders-view")
	// Batches of 20: most deliveries wait behind the batch being retried.
	cfg.AckTimeout, cfg.WriteTimeout, cfg.BatchSize = 2*time.Second, 500*time.Millisecond, 20
	c, err := projection.NewChangelog(e.bus, client, e.q, cfg, projection.WithLogger(embeddedtest.Logger(t)),
		projection.WithMiddlewares(func(next jetbus.Handler) jetbus.Handler {
			return func(ctx context.Context, d *jetbus.Delivery) error {
				if d.Attempt > 1 {
					redelivered.Add(1)
				}
				return next(ctx, d)
			}
		}))
	require.NoError(t, err)
	r := start(t, c.Run)
	// Five ack timeouts of failures: the deliveries held behind the first batches wait all
	// along, and the retry backoff (from 100 ms, doubling, up to 5 s) passes the ack timeout
	// after about 3 s.
	time.Sleep(5 * cfg.AckTimeout)
	faultOff(t, e.db.Client())
	e.waitLag("orders-view", 30*time.Second)
	require.NoError(t, r.stop())
	docs := e.docs("view")
	require.Len(t, docs, 50)
	for k := range 50 {
		assert.Equal(t, int64(150+k), docs[fmt.Sprintf("k%d", k)]["n"], "k%d holds its last event", k)
	}
	if m, err := advisories.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("the server gave a delivery up: %s", m.Data)
	}
	assert.Empty(t, e.letters(), "nothing dead-lettered")
	assert.Zero(t, redelivered.Load(), "deliveries the server sent again")
}
