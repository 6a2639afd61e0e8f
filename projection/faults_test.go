package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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
