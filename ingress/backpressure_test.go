package ingress_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestBackpressureBoundsMemory: while JetStream refuses to store (the topic's stream is full
// and discards new messages), a client floods ingress with far more than it may hold.
// Ingress holds max_in_flight messages, NATS buffers up to the pending limits and drops the
// rest, metrics and logs say so, and the process's heap grows by a fraction of the flood.
// Once JetStream is back, every message is either stored (once) or counted as dropped: none
// is lost without a trace.
func TestBackpressureBoundsMemory(t *testing.T) {
	n, size := 20_000, 8<<10
	if testing.Short() {
		n = 5_000
	}
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 2})
	const maxInFlight = 32
	g := e.run(ingress.Config{Allow: []string{"orders"}, MaxInFlight: maxInFlight, PendingMsgs: 512, PendingBytes: 1 << 20,
		AckTimeout: 300 * time.Millisecond})
	nc := client(t, e.url)
	fillUp(t, e, "orders")

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	body := []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`)
	peak := uint64(0)
	for i := range n {
		m := nats.NewMsg("in.orders")
		m.Data = body
		m.Header.Set(jetbus.HeaderMsgID, fmt.Sprintf("m-%d", i))
		require.NoError(t, nc.PublishMsg(m))
		if i%2000 == 1999 {
			require.NoError(t, nc.Flush())
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	require.NoError(t, nc.Flush())
	flood := uint64(n * len(body))
	grown := int64(peak) - int64(before.HeapInuse)
	t.Logf("flood %d MiB, heap in use grew by at most %d MiB", flood>>20, grown>>20)
	assert.Less(t, grown, int64(flood/4), "the heap grows by a fraction of the flood")

	require.Eventually(t, func() bool { st := g.Stats(); return st.Dropped > 0 && st.InFlight == maxInFlight },
		wait, 10*time.Millisecond, "ingress holds max_in_flight and NATS drops beyond the pending buffer")
	assert.True(t, g.Stats().Backpressure)
	require.Eventually(t, func() bool {
		return g.logs.logged(slog.LevelWarn, "ingress back-pressure") && g.logs.logged(slog.LevelWarn, "NATS is dropping messages to ingress") &&
			g.logs.logged(slog.LevelWarn, "JetStream unavailable")
	}, wait, 10*time.Millisecond, "the log says ingress paused, NATS dropped, JetStream refused")
	assert.Equal(t, 1.0, metricValue(t, g, "ingress_backpressure"))
	assert.Equal(t, float64(maxInFlight), metricValue(t, g, "ingress_inflight"))
	// The prober finds the stream and closes the breaker, the next publish opens it again.
	require.Eventually(t, func() bool {
		return g.Stats().JetStreamUnavailable && metricValue(t, g, "ingress_jetstream_unavailable") == 1
	}, wait, 5*time.Millisecond)

	unfill(t, e, "orders")
	require.Eventually(t, func() bool { return g.Stats().InFlight == 0 }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool { st := g.Stats(); return e.count("orders")-1+st.Dropped+st.Shed == uint64(n) }, wait, 50*time.Millisecond,
		"every message is stored or counted as dropped (by NATS, or shed by ingress)")
	for id, seqs := range e.ids("orders") {
		require.Len(t, seqs, 1, "%s stored once", id)
	}
	st := g.Stats()
	assert.Equal(t, st.Dropped, uint64(metricValue(t, g, "ingress_dropped_total")))
	assert.Equal(t, st.Shed, uint64(metricValue(t, g, "ingress_shed_total")))
	assert.Equal(t, st.Accepted, e.count("orders")-1)
	assert.Zero(t, st.Abandoned)
	assert.Zero(t, metricValue(t, g, "ingress_backpressure"))
}
