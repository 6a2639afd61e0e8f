package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/projection"
)

// faultClient connects the projection's MongoDB client, with the application name fault
// injection is scoped to.
func faultClient(t *testing.T) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(embeddedtest.MongoURI(t)).SetAppName(faultApp))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// TestServerLabelledRetryableErrors: the projection's writes fail with errors MongoDB
// itself labels RetryableWriteError (no errorLabels in the fault: the label is the
// server's, as a step-down or a shutdown produces it). The driver retries each write once
// and gives up on the second failure; the projection retries what the driver gave up on,
// so the view holds every event, nothing is dead-lettered, and every fault fired.
func TestServerLabelledRetryableErrors(t *testing.T) {
	for _, code := range []int{189 /* PrimarySteppedDown */, 91 /* ShutdownInProgress */, 11602 /* InterruptedDueToReplStateChange */} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			const n, faults = 100, 6
			e := newEnv(t, "orders", 2)
			client := faultClient(t)
			for i := range n {
				e.publish(fmt.Sprintf("k%d", i%20), fmt.Sprintf(`{"n":%d}`, i))
			}
			before := embeddedtest.MongoFailPointActivations(t, e.db.Client(), "failCommand")
			embeddedtest.InjectMongoFault(t, e.db.Client(), embeddedtest.MongoFault{Commands: []string{"update"}, Times: faults, Code: code, AppName: faultApp})
			c, err := projection.NewChangelog(e.bus, client, e.q, e.config("orders-view"), projection.WithLogger(embeddedtest.Logger(t)))
			require.NoError(t, err)
			r := start(t, c.Run)
			e.waitLag("orders-view", 30*time.Second)
			require.NoError(t, r.stop())
			assert.Equal(t, before+faults, embeddedtest.MongoFailPointActivations(t, e.db.Client(), "failCommand"), "every fault fired")
			docs := e.docs("view")
			require.Len(t, docs, 20)
			for k := range 20 {
				assert.Equal(t, int64(n-20+k), docs[fmt.Sprintf("k%d", k)]["n"], "k%d holds its last event", k)
			}
			assert.Empty(t, e.letters(), "nothing dead-lettered")
		})
	}
}

// TestLostWriteReplies: MongoDB applies the projection's writes and records them, then the
// connection closes before the reply (onPrimaryTransactionalWrite). The driver retries each
// write and the server answers from its record, so each event takes effect once. The fail
// point is deployment-wide; the test's own writes are not retryable writes. Two faults: the
// projection makes at least one bulk write per partition however it batches.
func TestLostWriteReplies(t *testing.T) {
	const n, faults = 100, 2
	e := newEnv(t, "orders", 2)
	client := faultClient(t)
	for i := range n {
		e.publish(fmt.Sprintf("k%d", i%20), fmt.Sprintf(`{"n":%d}`, i))
	}
	before := embeddedtest.MongoFailPointActivations(t, e.db.Client(), embeddedtest.OnPrimaryTransactionalWrite)
	embeddedtest.LoseMongoWriteReplies(t, e.db.Client(), faults)
	c, err := projection.NewChangelog(e.bus, client, e.q, e.config("orders-view"), projection.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	r := start(t, c.Run)
	e.waitLag("orders-view", 30*time.Second)
	require.NoError(t, r.stop())
	assert.Equal(t, before+faults, embeddedtest.MongoFailPointActivations(t, e.db.Client(), embeddedtest.OnPrimaryTransactionalWrite), "every fault fired")
	docs := e.docs("view")
	require.Len(t, docs, 20)
	for k := range 20 {
		assert.Equal(t, int64(n-20+k), docs[fmt.Sprintf("k%d", k)]["n"], "k%d holds its last event", k)
	}
	assert.Empty(t, e.letters(), "nothing dead-lettered")
}

// TestTransactionalCommitRetry: the transactional projection's commits fail in the ways that
// leave the outcome unknown to the client, the labels coming from the server. The projection
// commits again (never the whole transaction), and every event takes effect exactly once:
//   - UnknownTransactionCommitResult in the server's reply (failCommand's errorLabels), the
//     commit not applied;
//   - the commit applied, then a write concern error the server labels RetryableWriteError:
//     the driver retries once, fails again and adds UnknownTransactionCommitResult; the
//     projection's commit finds the transaction committed;
//   - commits held by the server before they run (blockConnection): the projection waits
//     for them (it sets no deadline on a commit) and each batch commits once.
func TestTransactionalCommitRetry(t *testing.T) {
	cases := []struct {
		name  string
		fault embeddedtest.MongoFault
	}{
		{"UnknownTransactionCommitResult from the server", embeddedtest.MongoFault{Code: 91, Labels: []string{"UnknownTransactionCommitResult"}}},
		{"commit applied, then retryable write concern errors", embeddedtest.MongoFault{
			WriteConcernError: &embeddedtest.MongoWriteConcernError{Code: 91, Message: "Replication is being shut down"}}},
		{"commit applied, then write concern timeouts", embeddedtest.MongoFault{
			WriteConcernError: &embeddedtest.MongoWriteConcernError{Code: 64, Message: "waiting for replication timed out"}}},
		{"commits held by the server (blockConnection)", embeddedtest.MongoFault{Block: 300 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const n, faults = 60, 3
			e := newEnv(t, "orders", 1)
			client := faultClient(t)
			for i := range n {
				e.publish(fmt.Sprintf("k%d", i%3), fmt.Sprintf(`{"n":%d}`, i))
			}
			before := embeddedtest.MongoFailPointActivations(t, e.db.Client(), "failCommand")
			tc.fault.Commands, tc.fault.Times, tc.fault.AppName = []string{"commitTransaction"}, faults, faultApp
			embeddedtest.InjectMongoFault(t, e.db.Client(), tc.fault)
			cfg := e.config("orders-tx")
			cfg.BatchSize = 8
			p, err := projection.NewTransactional(e.bus, client, e.q, counterHandler(client.Database(e.db.Name())), cfg,
				projection.WithLogger(embeddedtest.Logger(t)))
			require.NoError(t, err)
			r := start(t, p.Run)
			e.waitLag("orders-tx", 30*time.Second)
			require.NoError(t, r.stop())
			assert.Equal(t, before+faults, embeddedtest.MongoFailPointActivations(t, e.db.Client(), "failCommand"), "every fault fired")
			assert.Equal(t, int64(n), counter(t, e.db, "all"), "every event once")
			for k := range 3 {
				assert.Equal(t, int64(n/3), counter(t, e.db, fmt.Sprintf("key:k%d", k)))
			}
			assert.Empty(t, e.letters(), "nothing dead-lettered")
		})
	}
}
