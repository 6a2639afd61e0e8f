// Package bustest is the conformance suite of the jetbus.Bus contract. Every implementation
// (and every deployment shape of one: a single server, a cluster) runs the same suite:
//
//	bustest.Run(t, bustest.Harness{NewBus: ..., CreateTopic: ...})
//
// It checks delivery of everything published, order per key, each starting position, retries,
// MaxAttempts, Permanent, manual ack and nack, cursors and rebuilds, duplicate IDs, stop and
// resume, fan-in, and, when the harness can disrupt the system, that no acknowledged publish
// is lost while it is disrupted. With Harness.Unordered every subscription is
// jetbus.Unordered: the same cases hold but order per key, and two clients of one group share
// a partition.
package bustest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
)

// Harness connects the suite to an implementation.
type Harness struct {
	// NewBus returns a new client of the system under test; each call is a separate client,
	// as another process would have. The harness closes it when the test ends.
	NewBus func(t *testing.T) jetbus.Bus
	// CreateTopic creates topic with the given number of partitions.
	CreateTopic func(t *testing.T, topic string, partitions int)
	// Disrupt, if set, disrupts the system mid-way through the durability test (e.g. stops
	// a server) and Restore undoes it.
	Disrupt, Restore func(t *testing.T)
	// Timeout bounds each wait (default 20s).
	Timeout time.Duration
	// Unordered runs the suite on unordered groups: every subscription is made with
	// jetbus.Unordered(). Order per key is not checked; instead, two clients of one group
	// must both receive events of one partition.
	Unordered bool
}

// unorderedBus subscribes every group unordered.
type unorderedBus struct{ jetbus.Bus }

func (b unorderedBus) Subscribe(ctx context.Context, topic, group string, h jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error) {
	return b.Bus.Subscribe(ctx, topic, group, h, append(slices.Clone(opts), jetbus.Unordered())...)
}

var topicSeq atomic.Int64

// topic returns a fresh topic name for one test.
func (h *Harness) topic(t *testing.T, partitions int) string {
	t.Helper()
	name := fmt.Sprintf("conf.t%d", topicSeq.Add(1))
	h.CreateTopic(t, name, partitions)
	return name
}

func (h *Harness) timeout() time.Duration {
	if h.Timeout == 0 {
		return 20 * time.Second
	}
	return h.Timeout
}

// fast are subscribe options that keep retries quick in tests.
var fast = []jetbus.SubscribeOption{jetbus.Backoff(jetbus.ExponentialBackoff(10*time.Millisecond, 50*time.Millisecond))}

func opts(extra ...jetbus.SubscribeOption) []jetbus.SubscribeOption {
	return append(append([]jetbus.SubscribeOption(nil), fast...), extra...)
}

// recorder collects deliveries.
type recorder struct {
	mu   sync.Mutex
	seen []*jetbus.Delivery
	ids  map[string]int
}

func newRecorder() *recorder { return &recorder{ids: make(map[string]int)} }

func (r *recorder) add(d *jetbus.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := *d
	r.seen = append(r.seen, &cp)
	r.ids[d.ID]++
}

func (r *recorder) handler(ctx context.Context, d *jetbus.Delivery) error {
	r.add(d)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

func (r *recorder) snapshot() []*jetbus.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*jetbus.Delivery(nil), r.seen...)
}

type body struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func publishN(t *testing.T, bus jetbus.Bus, topic string, n int, keys int) []*jetbus.Event {
	t.Helper()
	out := make([]*jetbus.Event, 0, n)
	for i := range n {
		k := fmt.Sprintf("k%d", i%max(keys, 1))
		e, err := bus.Publish(context.Background(), topic, body{Key: k, N: i}, jetbus.WithKey(k))
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func subscribe(t *testing.T, bus jetbus.Bus, topic, group string, h jetbus.Handler, o ...jetbus.SubscribeOption) jetbus.Subscription {
	t.Helper()
	sub, err := bus.Subscribe(context.Background(), topic, group, h, opts(o...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	return sub
}

func (h *Harness) eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, h.timeout(), 10*time.Millisecond, append([]any{msg}, args...)...)
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	if h.Unordered {
		newBus := h.NewBus
		h.NewBus = func(t *testing.T) jetbus.Bus { return unorderedBus{newBus(t)} }
	}
	t.Run("DeliversEverything", h.testDeliversEverything)
	if h.Unordered {
		t.Run("UnorderedClientsSharePartition", h.testShare)
	} else {
		t.Run("OrderPerKey", h.testOrderPerKey)
	}
	t.Run("FromEarliest", h.testFromEarliest)
	t.Run("FromLatest", h.testFromLatest)
	t.Run("FromTime", h.testFromTime)
	t.Run("AfterID", h.testAfterID)
	t.Run("AfterSeq", h.testAfterSeq)
	t.Run("RedeliveryAfterError", h.testRedelivery)
	t.Run("MaxAttempts", h.testMaxAttempts)
	t.Run("Permanent", h.testPermanent)
	t.Run("ManualAckNack", h.testManualAck)
	t.Run("CursorAndRebuild", h.testCursorRebuild)
	t.Run("DuplicateIDDropped", h.testDuplicate)
	t.Run("StopResumeKeepsPosition", h.testStopResume)
	t.Run("DrainFinishesFetched", h.testDrain)
	t.Run("FanIn", h.testFanIn)
	t.Run("Filter", h.testFilter)
	t.Run("EventFieldsRoundTrip", h.testFields)
	t.Run("GroupsAreIndependent", h.testGroups)
	if h.Disrupt != nil {
		t.Run("NoAckedPublishLostWhileDisrupted", h.testDisrupted)
	}
}

func (h *Harness) testDeliversEverything(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 4)
	pub := publishN(t, bus, topic, 200, 200)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return r.distinct() == 200 }, "every event delivered")
	for _, e := range pub {
		assert.Equal(t, 1, r.ids[e.ID], "event %s delivered once", e.ID)
	}
}

func (h *Harness) testOrderPerKey(t *testing.T) {
	pubBus, subBus := h.NewBus(t), h.NewBus(t)
	topic := h.topic(t, 4)
	r := newRecorder()
	subscribe(t, subBus, topic, "g", r.handler, jetbus.FromEarliest())
	publishN(t, pubBus, topic, 400, 8)
	h.eventually(t, func() bool { return r.distinct() == 400 }, "every event delivered")
	last := map[string]int{}
	for _, d := range r.snapshot() {
		var b body
		require.NoError(t, json.Unmarshal(d.Payload, &b))
		if prev, ok := last[b.Key]; ok {
			assert.Greater(t, b.N, prev, "key %s out of order", b.Key)
		}
		last[b.Key] = b.N
	}
}

// testShare: two clients of one unordered group both consume the one partition, at the same
// time: each holds an event in its handler until the other has received one too.
func (h *Harness) testShare(t *testing.T) {
	pubBus := h.NewBus(t)
	topic := h.topic(t, 1)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		got  [2]int
	)
	both := make(chan struct{})
	var bothOnce sync.Once
	handler := func(i int) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			mu.Lock()
			seen[d.ID]++
			got[i]++
			first, other := got[i] == 1, got[1-i]
			mu.Unlock()
			if other > 0 {
				bothOnce.Do(func() { close(both) })
			}
			if first {
				// Hold the first event (unacknowledged) until the other client has one.
				select {
				case <-both:
				case <-time.After(h.timeout()):
					return fmt.Errorf("client %d: the other client received nothing while this one held an event", i)
				}
			}
			return nil
		}
	}
	// Pulls of one event: one client cannot take every event in one pull.
	for i := range 2 {
		subscribe(t, h.NewBus(t), topic, "g", handler(i), jetbus.FromEarliest(), jetbus.BatchSize(1))
	}
	pub := publishN(t, pubBus, topic, 100, 10)
	select {
	case <-both:
	case <-time.After(h.timeout()):
		t.Fatal("one client received every event: the partition was not shared")
	}
	h.eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == len(pub)
	}, "every event handled")
	h.eventually(t, func() bool {
		c, err := pubBus.Cursor(context.Background(), topic, "g")
		return err == nil && c.Lag() == 0
	}, "every event acknowledged")
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, got[0], "client 0 handled events")
	assert.Positive(t, got[1], "client 1 handled events")
}

func (h *Harness) testFromEarliest(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	publishN(t, bus, topic, 10, 3)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return r.distinct() == 10 }, "earliest sees the past")
}

func (h *Harness) testFromLatest(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	publishN(t, bus, topic, 10, 3)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler) // Latest is the default
	after := publishN(t, bus, topic, 5, 3)
	h.eventually(t, func() bool { return r.distinct() == 5 }, "latest sees only the new events")
	for _, e := range after {
		assert.Equal(t, 1, r.ids[e.ID])
	}
}

func (h *Harness) testFromTime(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	publishN(t, bus, topic, 10, 3)
	// Wait until the clock has moved past the last stored event.
	t0 := time.Now()
	h.eventually(t, func() bool { return time.Since(t0) > 5*time.Millisecond }, "clock moves")
	mark := time.Now()
	after := publishN(t, bus, topic, 7, 3)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromTime(mark))
	h.eventually(t, func() bool { return r.distinct() == 7 }, "from time sees the events after it")
	for _, e := range after {
		assert.Equal(t, 1, r.ids[e.ID])
	}
}

func (h *Harness) testAfterID(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 3)
	pub := publishN(t, bus, topic, 20, 5)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.AfterID(pub[11].ID))
	h.eventually(t, func() bool { return r.distinct() == 8 }, "after id sees the 8 later events")
	for _, e := range pub[12:] {
		assert.Equal(t, 1, r.ids[e.ID])
	}
	_, err := bus.Subscribe(context.Background(), topic, "g2", r.handler, jetbus.AfterID("no-such-event"))
	assert.ErrorIs(t, err, jetbus.ErrEventNotFound)
}

func (h *Harness) testAfterSeq(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 3)
	pub := publishN(t, bus, topic, 20, 5)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.AfterSeq(pub[4].Seq))
	h.eventually(t, func() bool { return r.distinct() == 15 }, "after seq sees the later events")
	for _, e := range pub[5:] {
		assert.Equal(t, 1, r.ids[e.ID])
	}
}

func (h *Harness) testRedelivery(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, topic, "g", func(ctx context.Context, d *jetbus.Delivery) error {
		r.add(d)
		if d.Attempt == 1 {
			return fmt.Errorf("transient")
		}
		return nil
	}, jetbus.FromEarliest())
	publishN(t, bus, topic, 3, 3)
	h.eventually(t, func() bool { return r.count() == 6 }, "each event delivered twice")
	attempts := map[string][]int{}
	for _, d := range r.snapshot() {
		attempts[d.ID] = append(attempts[d.ID], d.Attempt)
		assert.Equal(t, jetbus.DefaultMaxAttempts, d.MaxAttempts)
	}
	for id, a := range attempts {
		assert.Equal(t, []int{1, 2}, a, "attempts of %s", id)
	}
	h.eventually(t, func() bool {
		c, err := bus.Cursor(context.Background(), topic, "g")
		return err == nil && c.Lag() == 0
	}, "all acknowledged")
}

func (h *Harness) testMaxAttempts(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, topic, "g", func(ctx context.Context, d *jetbus.Delivery) error {
		r.add(d)
		return fmt.Errorf("always fails")
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(3))
	publishN(t, bus, topic, 1, 1)
	h.eventually(t, func() bool { return r.count() >= 3 }, "three attempts")
	h.eventually(t, func() bool {
		c, err := bus.Cursor(context.Background(), topic, "g")
		return err == nil && c.Lag() == 0
	}, "the server stops delivering after MaxAttempts")
	// A later event still flows, and the failed one was not delivered again meanwhile.
	ok := newRecorder()
	subscribe(t, bus, topic, "g2", ok.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return ok.count() == 1 }, "the event is still in the topic")
	got := r.snapshot()
	require.Len(t, got, 3)
	for i, d := range got {
		assert.Equal(t, i+1, d.Attempt)
		assert.Equal(t, 3, d.MaxAttempts)
	}
	assert.True(t, got[2].LastAttempt())
}

func (h *Harness) testPermanent(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, topic, "g", func(ctx context.Context, d *jetbus.Delivery) error {
		r.add(d)
		var b body
		_ = json.Unmarshal(d.Payload, &b)
		if b.N == 0 {
			return jetbus.Permanent(fmt.Errorf("cannot ever work"))
		}
		return nil
	}, jetbus.FromEarliest())
	publishN(t, bus, topic, 2, 1)
	h.eventually(t, func() bool {
		c, err := bus.Cursor(context.Background(), topic, "g")
		return err == nil && c.Lag() == 0 && r.count() >= 2
	}, "both settled")
	assert.Equal(t, 2, r.count(), "a permanent failure is not retried")
}

func (h *Harness) testManualAck(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest(), jetbus.ManualAck())
	pub := publishN(t, bus, topic, 3, 1)
	h.eventually(t, func() bool { return r.count() == 3 }, "three deliveries")
	ctx := context.Background()
	require.NoError(t, bus.Ack(ctx, topic, "g", pub[0].ID))
	require.NoError(t, bus.Nack(ctx, topic, "g", pub[1].ID))
	assert.ErrorIs(t, bus.Ack(ctx, topic, "g", pub[0].ID), jetbus.ErrUnknownEvent, "acked twice")
	assert.ErrorIs(t, bus.Ack(ctx, topic, "g", "nope"), jetbus.ErrUnknownEvent)
	h.eventually(t, func() bool { return r.count() == 4 }, "the nacked event comes back")
	again := r.snapshot()[3]
	assert.Equal(t, pub[1].ID, again.ID)
	assert.Equal(t, 2, again.Attempt)
	require.NoError(t, bus.Ack(ctx, topic, "g", pub[1].ID))
	require.NoError(t, bus.Ack(ctx, topic, "g", pub[2].ID))
	h.eventually(t, func() bool {
		c, err := bus.Cursor(ctx, topic, "g")
		return err == nil && c.Lag() == 0
	}, "all acknowledged")
}

func (h *Harness) testCursorRebuild(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	ctx := context.Background()
	_, err := bus.Cursor(ctx, topic, "g")
	require.ErrorIs(t, err, jetbus.ErrGroupNotFound)
	pub := publishN(t, bus, topic, 10, 4)
	r := newRecorder()
	sub := subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool {
		c, err := bus.Cursor(ctx, topic, "g")
		return err == nil && c.Lag() == 0 && r.count() == 10
	}, "consumed")
	require.NoError(t, sub.Stop())
	c, err := bus.Cursor(ctx, topic, "g")
	require.NoError(t, err)
	assert.Equal(t, topic, c.Topic)
	assert.Equal(t, "g", c.Group)
	require.Len(t, c.Partitions, 2)
	var maxFloor uint64
	for _, p := range c.Partitions {
		maxFloor = max(maxFloor, p.AckFloor)
	}
	assert.Equal(t, pub[9].Seq, maxFloor, "ack floor reaches the last event")

	// Rebuild: move the group back to the start and consume everything again.
	require.NoError(t, bus.SetCursor(ctx, topic, "g", jetbus.Earliest()))
	r2 := newRecorder()
	subscribe(t, bus, topic, "g", r2.handler)
	h.eventually(t, func() bool { return r2.distinct() == 10 }, "rebuild sees every event again")

	// Move a running group forward past everything: nothing more is delivered, new events are.
	require.NoError(t, bus.SetCursor(ctx, topic, "g", jetbus.Latest()))
	more := publishN(t, bus, topic, 3, 3)
	h.eventually(t, func() bool {
		r2.mu.Lock()
		defer r2.mu.Unlock()
		for _, e := range more {
			if r2.ids[e.ID] == 0 {
				return false
			}
		}
		return true
	}, "new events after SetCursor(Latest)")
	assert.ErrorIs(t, bus.SetCursor(ctx, topic, "bad group!", jetbus.Earliest()), jetbus.ErrInvalidGroup)
	assert.ErrorIs(t, bus.SetCursor(ctx, topic, "g", jetbus.AfterEvent("missing")), jetbus.ErrEventNotFound)

	// A group that never consumed is created at the position: its lag counts from there.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, bus.SetCursor(sctx, topic, "fresh", jetbus.AfterEvent(pub[4].ID)), "position a new group")
	c, err = bus.Cursor(ctx, topic, "fresh")
	require.NoError(t, err)
	assert.Equal(t, uint64(len(pub)-5+len(more)), c.Lag(), "the new group's lag")
}

func (h *Harness) testDuplicate(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	ctx := context.Background()
	e1, err := bus.Publish(ctx, topic, body{N: 1}, jetbus.WithID("order-1"), jetbus.WithKey("a"))
	require.NoError(t, err)
	e2, err := bus.Publish(ctx, topic, body{N: 1}, jetbus.WithID("order-1"), jetbus.WithKey("a"))
	require.NoError(t, err)
	assert.Equal(t, e1.Seq, e2.Seq, "the duplicate reports the stored event")
	_, err = bus.Publish(ctx, topic, body{N: 2}, jetbus.WithKey("a"))
	require.NoError(t, err)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return r.count() == 2 }, "two distinct events")
	assert.Equal(t, 1, r.ids["order-1"])
}

func (h *Harness) testStopResume(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	ctx := context.Background()
	publishN(t, bus, topic, 10, 4)
	r := newRecorder()
	sub := subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool {
		c, err := bus.Cursor(ctx, topic, "g")
		return err == nil && c.Lag() == 0 && r.count() == 10
	}, "first ten")
	require.NoError(t, sub.Stop())
	select {
	case <-sub.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	more := publishN(t, bus, topic, 5, 4)
	// Another client resumes the group: FromEarliest does not apply to an existing group.
	other := h.NewBus(t)
	r2 := newRecorder()
	subscribe(t, other, topic, "g", r2.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return r2.distinct() == 5 }, "only the new five")
	for _, e := range more {
		assert.Equal(t, 1, r2.ids[e.ID])
	}
	assert.Equal(t, 5, r2.count())
}

func (h *Harness) testDrain(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	ctx := context.Background()
	publishN(t, bus, topic, 50, 1)
	r := newRecorder()
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	sub := subscribe(t, bus, topic, "g", func(ctx context.Context, d *jetbus.Delivery) error {
		once.Do(func() { close(started) })
		<-release
		r.add(d)
		return nil
	}, jetbus.FromEarliest(), jetbus.BatchSize(10))
	<-started
	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(ctx) }()
	close(release)
	require.NoError(t, <-drained)
	n := r.count()
	assert.GreaterOrEqual(t, n, 1)
	// Acks travel asynchronously; the server settles them shortly after Drain returns.
	h.eventually(t, func() bool {
		c, err := bus.Cursor(ctx, topic, "g")
		return err == nil && c.Partitions[0].AckPending == 0
	}, "drain settles everything it fetched")
	// The rest is consumed by the next subscription, without loss.
	r2 := newRecorder()
	subscribe(t, bus, topic, "g", r2.handler)
	h.eventually(t, func() bool { return n+r2.count() >= 50 && r2.distinct()+r.distinct() >= 50 }, "the rest follows")
}

func (h *Harness) testFanIn(t *testing.T) {
	bus := h.NewBus(t)
	a, b := h.topic(t, 2), h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, a, "g", r.handler, jetbus.FromEarliest(), jetbus.FanIn(b))
	publishN(t, bus, a, 6, 3)
	publishN(t, bus, b, 4, 2)
	h.eventually(t, func() bool { return r.distinct() == 10 }, "both topics delivered")
	topics := map[string]int{}
	for _, d := range r.snapshot() {
		topics[d.Topic]++
	}
	assert.Equal(t, map[string]int{a: 6, b: 4}, topics)
}

func (h *Harness) testFilter(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 1)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest(), jetbus.Filter(func(e *jetbus.Event) bool {
		return e.Key == "k0"
	}))
	publishN(t, bus, topic, 10, 2)
	h.eventually(t, func() bool {
		c, err := bus.Cursor(context.Background(), topic, "g")
		return err == nil && c.Lag() == 0 && r.count() == 5
	}, "only k0, everything settled")
	for _, d := range r.snapshot() {
		assert.Equal(t, "k0", d.Key)
	}
}

func (h *Harness) testFields(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 3)
	ts := time.UnixMilli(1_700_000_000_123)
	pub, err := bus.Publish(context.Background(), topic, map[string]any{"a": 1},
		jetbus.WithKey("user-1"), jetbus.WithTS(ts), jetbus.WithSID("boot-1"),
		jetbus.WithHeaders(map[string]string{"x-trace": "abc"}),
		jetbus.WithTags("red", "blue"), jetbus.WithCausedBy("c1", "c2"))
	require.NoError(t, err)
	tomb, err := bus.Publish(context.Background(), topic, nil, jetbus.WithKey("user-1"))
	require.NoError(t, err)
	r := newRecorder()
	subscribe(t, bus, topic, "g", r.handler, jetbus.FromEarliest())
	h.eventually(t, func() bool { return r.count() == 2 }, "delivered")
	got := r.snapshot()
	d := got[0]
	assert.Equal(t, pub.ID, d.ID)
	assert.Equal(t, topic, d.Topic)
	assert.Equal(t, "user-1", d.Key)
	assert.Equal(t, pub.Partition, d.Partition)
	assert.True(t, ts.Equal(d.TS), "ts %v != %v", d.TS, ts)
	assert.Equal(t, "boot-1", d.SID)
	assert.Equal(t, "abc", d.Header("x-trace"))
	assert.Equal(t, []string{"red", "blue"}, d.Tags)
	assert.Equal(t, []string{"c1", "c2"}, d.CausedBy)
	assert.JSONEq(t, `{"a":1}`, string(d.Payload))
	assert.Equal(t, pub.Seq, d.Seq)
	assert.Equal(t, "g", d.Group)
	assert.Equal(t, tomb.ID, got[1].ID)
	assert.True(t, got[1].Tombstone())
	assert.False(t, d.Tombstone())
}

func (h *Harness) testGroups(t *testing.T) {
	bus := h.NewBus(t)
	topic := h.topic(t, 2)
	r1, r2 := newRecorder(), newRecorder()
	subscribe(t, bus, topic, "g1", r1.handler, jetbus.FromEarliest())
	subscribe(t, bus, topic, "g2", r2.handler, jetbus.FromEarliest())
	publishN(t, bus, topic, 20, 5)
	h.eventually(t, func() bool { return r1.distinct() == 20 && r2.distinct() == 20 }, "each group sees everything")
}

func (h *Harness) testDisrupted(t *testing.T) {
	pubBus, subBus := h.NewBus(t), h.NewBus(t)
	topic := h.topic(t, 4)
	r := newRecorder()
	subscribe(t, subBus, topic, "g", r.handler, jetbus.FromEarliest())
	var acked []*jetbus.Event
	publish := func(n int) {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
			e, err := pubBus.Publish(ctx, topic, body{N: i}, jetbus.WithKey(fmt.Sprint(i%16)))
			cancel()
			if err == nil {
				acked = append(acked, e)
			}
		}
	}
	publish(100)
	h.Disrupt(t)
	publish(100)
	h.Restore(t)
	publish(50)
	require.GreaterOrEqual(t, len(acked), 200, "most publishes are acknowledged through the disruption")
	h.eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range acked {
			if r.ids[e.ID] == 0 {
				return false
			}
		}
		return true
	}, "every acknowledged publish is delivered")
}
