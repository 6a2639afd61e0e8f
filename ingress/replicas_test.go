package ingress_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// publishNumbers publishes bodies {"n": from} … {"n": to-1} to in.<topic>, fire-and-forget,
// keyed over 100 keys, flushing every thousand.
func publishNumbers(t *testing.T, nc *nats.Conn, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m := nats.NewMsg("in." + topic)
		m.Data = fmt.Appendf(nil, `{"n":%d}`, i)
		m.Header.Set("x-key", fmt.Sprintf("k%d", i%100))
		if err := nc.PublishMsg(m); err != nil {
			t.Errorf("publish %d: %v", i, err)
			return
		}
		if i%1000 == 999 {
			if err := nc.Flush(); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Errorf("flush: %v", err)
	}
}

// exactlyOnce checks that topic holds {"n": 0} … {"n": n-1}, each once.
func exactlyOnce(t *testing.T, e *env, topic string, n int) {
	t.Helper()
	seen := e.numbers(topic)
	var missing, doubled []int
	for i := range n {
		switch seen[i] {
		case 1:
		case 0:
			missing = append(missing, i)
		default:
			doubled = append(doubled, i)
		}
	}
	assert.Empty(t, missing, "every message stored")
	assert.Empty(t, doubled, "no message stored twice")
	assert.Len(t, seen, n)
}

// TestTwoReplicasExactlyOnce: two ingress replicas (each with its own connections and Bus,
// as two bridge processes) share in.> in one queue group; a client's 100,000 fire-and-forget
// messages are each stored exactly once, and both replicas took a share.
func TestTwoReplicasExactlyOnce(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 4})
	cfg := ingress.Config{Allow: []string{"orders"}}
	pa, _ := e.publisher()
	pb, _ := e.publisher()
	a, b := e.runWith(pa, cfg), e.runWith(pb, cfg)
	nc := client(t, e.url)

	publishNumbers(t, nc, "orders", 0, n)
	require.Eventually(t, func() bool { return e.count("orders") >= uint64(n) }, 3*time.Minute, 50*time.Millisecond,
		"every message stored")
	exactlyOnce(t, e, "orders", n)
	sa, sb := a.Stats(), b.Stats()
	assert.Positive(t, sa.Accepted, "replica a took a share")
	assert.Positive(t, sb.Accepted, "replica b took a share")
	assert.Equal(t, uint64(n), sa.Accepted+sb.Accepted)
	assert.Zero(t, sa.Dropped+sb.Dropped)
	assert.Zero(t, e.dlqCount())
}

// TestReplicaStopsWhileClientsPublish: one of two replicas stops gracefully (SIGTERM) while a
// client publishes; it hands over nothing and loses nothing: what NATS had buffered for it is
// stored before it returns, the rest goes to the other replica.
func TestReplicaStopsWhileClientsPublish(t *testing.T) {
	n := 40_000
	if testing.Short() {
		n = 8_000
	}
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 2})
	cfg := ingress.Config{Allow: []string{"orders"}}
	pa, _ := e.publisher()
	pb, _ := e.publisher()
	a, b := e.runWith(pa, cfg), e.runWith(pb, cfg)
	nc := client(t, e.url)

	done := make(chan struct{})
	go func() { defer close(done); publishNumbers(t, nc, "orders", 0, n) }()
	require.Eventually(t, func() bool { return e.count("orders") >= uint64(n/4) }, time.Minute, time.Millisecond)
	require.NoError(t, a.stop(t), "a graceful stop")
	stoppedAt := a.Stats().Accepted
	<-done
	require.Eventually(t, func() bool { return e.count("orders") >= uint64(n) }, 2*time.Minute, 20*time.Millisecond)
	exactlyOnce(t, e, "orders", n)
	sa, sb := a.Stats(), b.Stats()
	assert.Equal(t, stoppedAt, sa.Accepted, "the stopped replica took nothing after it returned")
	assert.Zero(t, sa.Abandoned)
	assert.Equal(t, uint64(n), sa.Accepted+sb.Accepted)
}
