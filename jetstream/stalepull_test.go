package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
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
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
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
	defer open() // before Stop: a failure below must not leave the handler waiting
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
	// partition's own (one request for the whole window, 100 events, which 4 events do not
	// use up): nats-server serves waiting requests in turn, moving one with messages left to
	// the back of its queue after each delivery.
	nc := embeddedtest.Connect(t, s.ClientURL())
	stream, consumer := jetbus.StreamName(topic), jetbus.ConsumerName(group, 0)
	js := bus.JetStream()
	cons, err := js.Consumer(ctx, stream, consumer)
	require.NoError(t, err)
	pin := cons.CachedInfo().PriorityGroups[0].PinnedClientID
	require.NotEmpty(t, pin)
	stolen := rawPull(t, nc, stream, consumer, 2, pin)
	waitWaiting(t, js, stream, consumer, 2) // the server queues requests on a goroutine of its own

	publish() // 5: the partition's
	publish() // 6: the raw request's
	publish() // 7: the partition's, after a gap
	m, err := stolen.NextMsg(5 * time.Second)
	require.NoError(t, err, "the raw request got no message: the server did not serve the requests in turn")
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, uint64(6), meta.Sequence.Stream, "the raw request took the event between the partition's two")

	open()
	// The partition sees the gap, resets the consumer, and the raw request, still waiting for
	// its second message, takes the first delivery after the reset (6 again).
	m, err = stolen.NextMsg(10 * time.Second)
	require.NoError(t, err, "the raw request got no second message: no reset, or the partition's new pull was served first")
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

// waitWaiting waits until the consumer has n pull requests waiting (the tests' partitions
// have one each: a request for their whole window, which their few events do not use up).
// rawPull sends a pull request of the group's priority group for batch messages, carrying
// pin when it is not empty, as a client other than the Bus's would, and returns the
// subscription its messages arrive on.
func rawPull(t *testing.T, nc *nats.Conn, stream, consumer string, batch int, pin string) *nats.Subscription {
	t.Helper()
	inbox, err := nc.SubscribeSync(nats.NewInbox())
	require.NoError(t, err)
	r := map[string]any{"batch": batch, "expires": int64(30 * time.Second), "group": jetbus.PriorityGroup}
	if pin != "" {
		r["id"] = pin
	}
	req, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, nc.PublishRequest(fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, consumer), inbox.Subject, req))
	return inbox
}

func waitWaiting(t *testing.T, js natsjs.JetStream, stream, consumer string, n int) {
	t.Helper()
	var have int
	ok := embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return false
		}
		have = cons.CachedInfo().NumWaiting
		return have == n
	})
	require.True(t, ok, "%d pull requests waiting at %s, want %d", have, consumer, n)
}

// TestGapBeforeThePin: a pull request the partition does not read takes the consumer's pin
// and its first delivery before the partition's first pull is served (a request of this
// client lost with its connection, or of a client that died with it). The partition gets
// the pin only when that one times out, and its first delivery must be checked against the
// consumer's state when it subscribed, or it handles event 2 while event 1 waits out its
// ack timeout.
func TestGapBeforeThePin(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPinnedTTL(time.Second))
	ctx := context.Background()
	const topic, group = "early", "g"
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic, Partitions: 1}))
	seqs := make(chan uint64, 100)
	handler := func(_ context.Context, d *jetbus.Delivery) error {
		seqs <- d.Seq
		return nil
	}
	// The group's consumer, created by a subscription that got nothing.
	first, err := bus.Subscribe(ctx, topic, group, handler, jetbus.FromEarliest(), jetbus.AckTimeout(time.Minute))
	require.NoError(t, err)
	require.NoError(t, first.Stop())

	stream, consumer := jetbus.StreamName(topic), jetbus.ConsumerName(group, 0)
	js := bus.JetStream()
	waitWaiting(t, js, stream, consumer, 0)
	nc := embeddedtest.Connect(t, s.ClientURL())
	stolen := rawPull(t, nc, stream, consumer, 1, "")
	waitWaiting(t, js, stream, consumer, 1)

	sub, err := bus.Subscribe(ctx, topic, group, handler, jetbus.FromEarliest(), jetbus.AckTimeout(time.Minute))
	require.NoError(t, err)
	defer sub.Stop()
	waitWaiting(t, js, stream, consumer, 2) // the raw request first, then the partition's
	for range 2 {
		_, err := bus.Publish(ctx, topic, map[string]int{"n": 1})
		require.NoError(t, err)
	}
	m, err := stolen.NextMsg(5 * time.Second)
	require.NoError(t, err, "the raw request, first in the queue, got no message")
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, uint64(1), meta.Sequence.Stream, "the raw request took the pin and event 1")

	var got []uint64
	for !slices.Contains(got, 2) {
		select {
		case seq := <-seqs:
			got = append(got, seq)
		case <-time.After(10 * time.Second):
			t.Fatalf("no delivery within 10s; handled so far %v", got)
		}
	}
	i1, i2 := slices.Index(got, 1), slices.Index(got, 2)
	require.True(t, i1 >= 0 && i1 < i2, "event 1 is handled before event 2: handled %v", got)
}
