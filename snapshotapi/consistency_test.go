package snapshotapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// TestReadYourWrites publishes an update and reads the key with after=<partition>:<seq>,
// 200 times: the answer is the new state every time, never the old, although the document
// cache holds the old state (read just before the publish) and the projection (an in-test
// writer that applies events as docs/views.md says) runs behind the API. Once projection
// exists, the end-to-end test does the same through it.
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
	for i := range 200 {
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
