package projection

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
)

// ackCounter is a Bus that counts the acknowledgements of each event ID.
type ackCounter struct {
	Bus // not called
	mu  sync.Mutex
	n   map[string]int
}

func (b *ackCounter) AckBatch(_ context.Context, _, _ string, ids ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		b.n[id]++
	}
	return nil
}

func (b *ackCounter) InProgress(context.Context, string, string, ...string) error { return nil }

func (b *ackCounter) acks(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[id]
}

// noDeadLetters lets every delivery through and stores nothing.
type noDeadLetters struct{}

func (noDeadLetters) DeadLetter(context.Context, *jetbus.Delivery, string, error) (uint64, error) {
	return 0, fmt.Errorf("no dead letters here")
}
func (noDeadLetters) Middleware() jetbus.HandlerMiddleware {
	return func(h jetbus.Handler) jetbus.Handler { return h }
}

// writeAll is a strategy whose writes all succeed.
type writeAll struct{}

func (writeAll) open(context.Context, *partState) error { return nil }
func (writeAll) decode(*entry)                          {}
func (writeAll) close(*partState)                       {}
func (writeAll) apply(_ context.Context, _ *partState, b *batch) error {
	for _, en := range b.entries {
		en.out = outWritten
	}
	return nil
}

// testPartition is partition 0 of topic orders of a projection "p" writing with writeAll
// into bus, batches of batchSize and no linger to speak of, its metrics in a registry of its
// own (m); it returns a function that hands the partition a first delivery of the event at
// stream sequence seq (ID "e<seq>").
func testPartition(t *testing.T, bus Bus, log *slog.Logger, batchSize int) (deliver func(seq uint64), m *metrics) {
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	m.seed("p")
	e := &engine{name: "p", group: "g", bus: bus, dl: noDeadLetters{}, s: writeAll{}, log: log, m: m,
		cfg:   Config{BatchSize: batchSize, Linger: time.Hour, WriteTimeout: 5 * time.Second, StopTimeout: 5 * time.Second},
		parts: map[partKey]*partState{}}
	ps := e.newPart("orders", 0)
	t.Cleanup(ps.abandon)
	return func(seq uint64) {
		t.Helper()
		d := &jetbus.Delivery{Event: &jetbus.Event{ID: fmt.Sprintf("e%d", seq), Topic: "orders", Key: "k", Seq: seq}, Group: "g", Attempt: 1}
		require.NoError(t, ps.handle(context.Background(), d))
	}, m
}

// TestRedeliveryOfAWrittenEventIsAcknowledged: the server delivers again an event whose ack
// timeout passed while the partition held it. A redelivery of an event still held is left to
// its batch's acknowledgement; one that crossed its batch's acknowledgement (the event is
// written) is acknowledged again, or the Bus would keep it pending for good, and take the
// partition for one whose application still holds deliveries.
func TestRedeliveryOfAWrittenEventIsAcknowledged(t *testing.T) {
	bus := &ackCounter{n: map[string]int{}}
	deliver, _ := testPartition(t, bus, slog.New(slog.DiscardHandler), 2)
	acked := func(ids ...string) func() bool {
		return func() bool {
			for _, id := range ids {
				if bus.acks(id) != 1 {
					return false
				}
			}
			return true
		}
	}

	deliver(1)
	deliver(2) // a full batch: written and acknowledged
	require.True(t, embeddedtest.Poll(10*time.Second, time.Millisecond, acked("e1", "e2")), "the first batch was not acknowledged")

	deliver(3) // held: the batch is not full
	deliver(3) // delivered again while held
	assert.Zero(t, bus.acks("e3"), "an event acknowledged before it was written")

	deliver(1) // delivered again after its batch was acknowledged
	assert.Equal(t, 2, bus.acks("e1"), "the redelivery of a written event was not acknowledged")

	deliver(4)
	require.True(t, embeddedtest.Poll(10*time.Second, time.Millisecond, acked("e3", "e4")), "the second batch was not acknowledged once")
}

// TestOutOfOrderDeliveryIsReported: a delivery below one the partition took, that it never
// took itself, can only come from a Bus that delivered out of order; the partition cannot
// apply it any more (its batches move the checkpoint past it), so it says so as an error. A
// redelivery of an event it holds is no error.
func TestOutOfOrderDeliveryIsReported(t *testing.T) {
	var logs embeddedtest.SyncBuffer
	deliver, m := testPartition(t, &ackCounter{n: map[string]int{}}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), 10)
	outOfOrder := m.outOfOrder.WithLabelValues("p")
	deliver(5)
	deliver(5) // held: a redelivery
	assert.Contains(t, logs.String(), `"msg":"redelivery of a held event dropped; its batch settles it"`)
	assert.NotContains(t, logs.String(), `"level":"ERROR"`)
	assert.Zero(t, testutil.ToFloat64(outOfOrder), "projection_out_of_order_total")
	deliver(3) // never taken, below 5
	assert.Contains(t, logs.String(), `"level":"ERROR","msg":"delivery out of order dropped: an event after it was taken first"`)
	assert.Contains(t, logs.String(), `"seq":3,"last":5`)
	assert.Equal(t, 1.0, testutil.ToFloat64(outOfOrder), "projection_out_of_order_total")
}
