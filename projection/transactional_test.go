package projection_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/projection"
)

// counterHandler $incs a counter per event, and the event's key's count, in the transaction.
func counterHandler(db *mongo.Database) projection.TxHandler {
	return func(ctx context.Context, d *jetbus.Delivery) error {
		up := options.UpdateOne().SetUpsert(true)
		if _, err := db.Collection("counters").UpdateOne(ctx, bson.D{{Key: "_id", Value: "all"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, up); err != nil {
			return err
		}
		_, err := db.Collection("counters").UpdateOne(ctx, bson.D{{Key: "_id", Value: "key:" + d.Key}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, up)
		return err
	}
}

func counter(t *testing.T, db *mongo.Database, id string) int64 {
	t.Helper()
	var doc struct {
		N int64 `bson:"n"`
	}
	err := db.Collection("counters").FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0
	}
	require.NoError(t, err)
	return doc.N
}

func (e *env) transactional(cfg projection.Config, h projection.TxHandler) *projection.Transactional {
	e.t.Helper()
	p, err := projection.NewTransactional(e.bus, e.db.Client(), e.q, h, cfg, projection.WithLogger(embeddedtest.Logger(e.t)))
	require.NoError(e.t, err)
	return p
}

// TestTransactionalOnce: every event takes effect once; a replay from the earliest event
// changes nothing (events at or below the checkpoint are skipped).
func TestTransactionalOnce(t *testing.T) {
	e := newEnv(t, "orders", 4)
	const n = 300
	for i := range n {
		e.publish(fmt.Sprintf("k%d", i%7), fmt.Sprintf(`{"n":%d}`, i))
	}
	cfg := e.config("orders-tx")
	cfg.BatchSize = 32
	r := start(t, e.transactional(cfg, counterHandler(e.db)).Run)
	e.waitLag("orders-tx", 30*time.Second)
	require.NoError(t, r.stop())
	assert.Equal(t, int64(n), counter(t, e.db, "all"))

	// Replay everything: the checkpoints skip it.
	require.NoError(t, e.bus.SetCursor(context.Background(), "orders", "orders-tx", jetbus.Earliest()))
	r = start(t, e.transactional(cfg, counterHandler(e.db)).Run)
	e.waitLag("orders-tx", 30*time.Second)
	require.NoError(t, r.stop())
	assert.Equal(t, int64(n), counter(t, e.db, "all"), "replayed events applied again")
	var total uint64
	for p := range 4 {
		seq, err := projection.ReadCheckpoint(context.Background(), e.db, "orders-tx", "orders", p)
		require.NoError(t, err)
		total += seq
	}
	assert.NotZero(t, total)
}

// TestTransactionalHandlerErrors: a Permanent error dead-letters the event at once, an error
// that persists dead-letters it after MaxAttempts, a passing error is retried; the other
// events of the batch take effect once.
func TestTransactionalHandlerErrors(t *testing.T) {
	e := newEnv(t, "orders", 1)
	for i := range 20 {
		e.publish(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	var mu sync.Mutex
	calls := map[string]int{}
	inc := counterHandler(e.db)
	h := func(ctx context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		calls[d.Key]++
		c := calls[d.Key]
		mu.Unlock()
		switch {
		case d.Key == "k3":
			return jetbus.Permanent(errors.New("k3 is poison"))
		case d.Key == "k7":
			return errors.New("k7 never works")
		case d.Key == "k11" && c == 1:
			return errors.New("k11 works the second time")
		}
		return inc(ctx, d)
	}
	cfg := e.config("orders-tx")
	cfg.MaxAttempts = 3
	r := start(t, e.transactional(cfg, h).Run)
	e.waitLag("orders-tx", 30*time.Second)
	require.NoError(t, r.stop())
	assert.Equal(t, int64(18), counter(t, e.db, "all"))
	for i := range 20 {
		want := int64(1)
		if i == 3 || i == 7 {
			want = 0
		}
		assert.Equal(t, want, counter(t, e.db, fmt.Sprintf("key:k%d", i)), "k%d", i)
	}
	letters := e.letters()
	require.Len(t, letters, 2)
	assert.Equal(t, "k3", letters[0].Key)
	assert.Contains(t, letters[0].Error, "k3 is poison")
	assert.Equal(t, "k7", letters[1].Key)
	assert.Equal(t, dlq.ReasonProjection, letters[1].Reason)
	mu.Lock()
	assert.Equal(t, 3, calls["k7"], "k7 tried MaxAttempts times")
	mu.Unlock()
}
