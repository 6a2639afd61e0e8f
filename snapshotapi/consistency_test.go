package snapshotapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/snapshotapi"
)

// TestReadYourWrites publishes an update and reads the key with after=<partition>:<seq>,
// readYourWritesRounds times (50; 200 in make test-long): the answer is the new state every
// time, never the old, although the document cache holds the old state (read just before the
// publish) and the projection (an in-test writer that applies events as docs/views.md says)
// runs behind the API. Once projection exists, the end-to-end test does the same through it.
func TestReadYourWrites(t *testing.T) {
	ctx := context.Background()
	ns := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, ns.ClientURL())
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders", Partitions: 4}))
	a := newAPI(t, true)
	// The cache's change stream lags (each getMore held 300 ms, still within the cache's
	// staleness bound): a read with after= that trusted the cache would see the old state.
	embeddedtest.InjectMongoFault(t, a.db.Client(), embeddedtest.MongoFault{Commands: []string{"getMore"}, Block: 300 * time.Millisecond, AppName: apiAppName})
	w := &writer{db: a.db, coll: "orders", group: "orders-view", topic: "orders", keepHistory: true}
	sub, err := bus.Subscribe(ctx, "orders", "orders-view", w.handle, jetbus.FromEarliest())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })

	key := "customer/42 é"
	path := "/v1/views/orders/customer%2F42%20%C3%A9"
	etag := ""
	last := map[int]uint64{} // the last event published to each partition
	for i := range readYourWritesRounds {
		if i > 0 { // the cached, now old, state
			r := a.get(path)
			require.Equal(t, 200, r.StatusCode)
		}
		ev, err := bus.Publish(ctx, "orders", map[string]any{"status": "open", "n": i}, jetbus.WithKey(key))
		require.NoError(t, err)
		last[ev.Partition] = ev.Seq
		r := a.get(fmt.Sprintf("%s?after=%d:%d", path, ev.Partition, ev.Seq), "If-None-Match", etag)
		require.Equal(t, 200, r.StatusCode, "iteration %d: %s", i, r.body)
		m := r.json(t)
		require.Equal(t, float64(i), m["n"], "iteration %d read an old state", i)
		require.Equal(t, key, m["_id"])
		etag = r.Header.Get("ETag")
		require.Equal(t, fmt.Sprintf(`"%d-`, ev.Seq), etag[:len(fmt.Sprint(ev.Seq))+2])
	}

	t.Run("a list waits too", func(t *testing.T) {
		ev, err := bus.Publish(ctx, "orders", map[string]any{"status": "listed"}, jetbus.WithKey("list-me"))
		require.NoError(t, err)
		last[ev.Partition] = ev.Seq
		r := a.get(fmt.Sprintf("/v1/views/orders?status=eq.listed&after=%d:%d", ev.Partition, ev.Seq))
		require.Equal(t, 200, r.StatusCode, "%s", r.body)
		assert.Equal(t, []string{"list-me"}, ids(t, r))
	})

	t.Run("a stalled projection answers 503 within wait", func(t *testing.T) {
		require.NoError(t, sub.Stop())
		applied := last[jetbus.PartitionOf(key, 4)]
		ev, err := bus.Publish(ctx, "orders", map[string]any{"status": "late"}, jetbus.WithKey(key))
		require.NoError(t, err)
		for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
			start := time.Now()
			r := a.get(fmt.Sprintf("%s?after=%d:%d&wait=%s", path, ev.Partition, ev.Seq, wait))
			took := time.Since(start)
			require.Equal(t, 503, r.StatusCode, "%s", r.body)
			assert.Equal(t, "not_applied", r.errorCode(t))
			assert.Equal(t, "1", r.Header.Get("Retry-After"))
			assert.GreaterOrEqual(t, took, wait)
			assert.Less(t, took, wait+time.Second, "answered within wait")
			d := r.json(t)["error"].(map[string]any)["details"].(map[string]any)
			assert.Equal(t, float64(ev.Partition), d["partition"])
			assert.Equal(t, float64(ev.Seq), d["wanted"])
			assert.Equal(t, float64(applied), d["applied"], "the writer applied everything before")
			assert.Equal(t, float64(ev.Seq-applied), d["behind"])
			assert.Equal(t, "orders-view", d["group"])
		}
		r := a.get(fmt.Sprintf("/v1/views/orders?after=%d:%d&wait=50ms", ev.Partition, ev.Seq))
		require.Equal(t, 503, r.StatusCode)

		// The projection resumes: the same request now succeeds.
		sub2, err := bus.Subscribe(ctx, "orders", "orders-view", w.handle)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub2.Stop() })
		r = a.get(fmt.Sprintf("%s?after=%d:%d&wait=5s", path, ev.Partition, ev.Seq))
		require.Equal(t, 200, r.StatusCode, "%s", r.body)
		assert.Equal(t, "late", r.json(t)["status"])
	})

	t.Run("a position of a partition no event reached yet", func(t *testing.T) {
		r := a.get("/v1/views/orders/x?after=3:999999&wait=10ms")
		require.Equal(t, 503, r.StatusCode)
		assert.Equal(t, "not_applied", r.errorCode(t))
	})
}

// checkpointFinds counts the find commands on jetbus_checkpoints among the API's.
func (a *api) checkpointFinds() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, f := range a.finds {
		if id, ok := f.Lookup("_id").StringValueOK(); ok && strings.Contains(id, "/orders/p") {
			n++
		}
	}
	return n
}

// TestWaitsAreWokenByProgress: with the change stream running, requests waiting for a
// position read the checkpoint when the projection writes it, not on a polling schedule;
// the projection's write answers every waiter at once; one waiter beyond MaxWaits gets 503.
func TestWaitsAreWokenByProgress(t *testing.T) {
	ctx := context.Background()
	a := newAPI(t, true, withConfig(func(c *snapshotapi.Config) { c.MaxWaits = 20 }))
	a.put("orders", doc("k", 1, t0, nil))
	checkpoints := a.db.Collection(snapshotapi.CheckpointsCollection)
	id := snapshotapi.CheckpointID("orders-view", "orders", 1)
	_, err := checkpoints.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "seq", Value: int64(1)}})
	require.NoError(t, err)
	eventually(t, func() bool { return a.get("/v1/views/orders/k?after=1:1").StatusCode == 200 }, "the first position is applied")
	eventually(t, func() bool { _, asked := a.served("k"); return !asked }, "the change stream runs: reads come from the cache")

	// 20 requests wait for seq 10 of partition 1 for up to 5 s.
	before := a.checkpointFinds()
	codes := make(chan int, 21)
	for range 20 {
		go func() { codes <- a.get("/v1/views/orders/k?after=1:10&wait=5s").StatusCode }()
	}
	require.True(t, embeddedtest.Poll(5*time.Second, 5*time.Millisecond, func() bool { return a.checkpointFinds()-before >= 20 }),
		"each waiter reads the checkpoint once")
	// The 21st is refused at once.
	r := a.get("/v1/views/orders/k?after=1:10&wait=5s")
	assert.Equal(t, 503, r.StatusCode)
	assert.Equal(t, snapshotapi.CodeUnavailable, r.errorCode(t))
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	// Quiet for 300 ms: polling (2 ms doubling to 50 ms) would read about 10 times per waiter.
	quiet := time.Now()
	require.False(t, embeddedtest.Poll(300*time.Millisecond, 10*time.Millisecond, func() bool { return a.checkpointFinds()-before > 20 }),
		"no waiter reads the checkpoint again while it does not change (%d reads in %s)", a.checkpointFinds()-before, time.Since(quiet))
	_, err = checkpoints.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "seq", Value: int64(10)}}}})
	require.NoError(t, err)
	start := time.Now()
	for range 20 {
		assert.Equal(t, 200, <-codes)
	}
	assert.Less(t, time.Since(start), 2*time.Second, "the write woke them, not their 5 s wait")
}
