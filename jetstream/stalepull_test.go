package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestGapAfterRecoveryReset: a pull request of the pinned client the partition no longer
// reads (one the server still holds after a reconnect or a node restart; here a raw request
// carrying the Bus's pin) takes deliveries away from the partition twice: first one in the
// middle of its pull, which the partition sees as a gap and recovers by resetting the consumer
// to its ack floor, and then the very first delivery after that reset. That one must be seen
// as a gap too (the consumer's sequence starts again at 1 after a reset), or the partition
// handles the next event while the one before it waits out its ack timeout: out of order, and
// a projection that checkpoints by stream sequence skips it for good.
func TestGapAfterRecoveryReset(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	const topic, group = "stale", "g"
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic, Partitions: 1}))

	gate, gateSeq := make(chan struct{}), uint64(4)
	seqs := make(chan uint64, 100)
	sub, err := bus.Subscribe(ctx, topic, group, func(_ context.Context, d *jetbus.Delivery) error {
		seqs <- d.Seq
		if d.Seq == gateSeq {
			<-gate
		}
		return nil
	}, jetbus.FromEarliest(), jetbus.AckTimeout(time.Minute))
	require.NoError(t, err)
	defer sub.Stop()
	publish := func() {
		t.Helper()
		_, err := bus.Publish(ctx, topic, map[string]int{"n": 1})
		require.NoError(t, err)
	}
	var got []uint64
	next := func() uint64 {
		t.Helper()
		select {
		case seq := <-seqs:
			got = append(got, seq)
			return seq
		case <-time.After(10 * time.Second):
			t.Fatalf("no delivery within 10s; handled so far %v", got)
			return 0
		}
	}
	for range gateSeq {
		publish()
	}
	for range gateSeq {
		next() // 1 … 4; the handler now waits on 4
	}

	// A raw pull request with the partition's pin, for two messages, queued behind the
	// partition's own: the server serves the two in turn.
	nc := embeddedtest.Connect(t, s.ClientURL())
	stream, consumer := jetbus.StreamName(topic), jetbus.ConsumerName(group, 0)
	js := bus.JetStream()
	cons, err := js.Consumer(ctx, stream, consumer)
	require.NoError(t, err)
	pin := cons.CachedInfo().PriorityGroups[0].PinnedClientID
	require.NotEmpty(t, pin)
	stolen, err := nc.SubscribeSync(nats.NewInbox())
	require.NoError(t, err)
	req, err := json.Marshal(map[string]any{"batch": 2, "expires": int64(30 * time.Second), "group": jetbus.PriorityGroup, "id": pin})
	require.NoError(t, err)
	require.NoError(t, nc.PublishRequest(fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, consumer), stolen.Subject, req))
	require.NoError(t, nc.Flush())

	publish() // 5: the partition's
	publish() // 6: the raw request's
	publish() // 7: the partition's, after a gap
	m, err := stolen.NextMsg(5 * time.Second)
	require.NoError(t, err)
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, uint64(6), meta.Sequence.Stream, "the raw request took the event between the partition's two")

	close(gate)
	// The partition sees the gap, resets the consumer, and the raw request, still waiting for
	// its second message, takes the first delivery after the reset (6 again).
	m, err = stolen.NextMsg(10 * time.Second)
	require.NoError(t, err)
	meta, err = m.Metadata()
	require.NoError(t, err)
	require.Equal(t, uint64(6), meta.Sequence.Stream, "the raw request took the first delivery after the reset")

	// Whatever else comes (redeliveries), 6 is handled before 7.
	for !slices.Contains(got, 7) {
		next()
	}
	i6, i7 := slices.Index(got, 6), slices.Index(got, 7)
	require.True(t, i6 >= 0 && i6 < i7, "event 6 is handled before event 7: handled %v", got)
}
