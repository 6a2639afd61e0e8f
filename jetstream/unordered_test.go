package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// attemptRecorder records each delivery's ID and attempt.
type attemptRecorder struct {
	mu       sync.Mutex
	attempts map[string][]int
}

func newAttemptRecorder() *attemptRecorder { return &attemptRecorder{attempts: map[string][]int{}} }

func (r *attemptRecorder) add(d *jetbus.Delivery) {
	r.mu.Lock()
	r.attempts[d.ID] = append(r.attempts[d.ID], d.Attempt)
	r.mu.Unlock()
}

func (r *attemptRecorder) handler(_ context.Context, d *jetbus.Delivery) error { r.add(d); return nil }

func (r *attemptRecorder) distinct() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.attempts) }

func (r *attemptRecorder) snapshot() map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]int, len(r.attempts))
	for id, a := range r.attempts {
		out[id] = append([]int(nil), a...)
	}
	return out
}

func consumerConfig(t *testing.T, b *jbjs.Bus, topic, group string, p int) natsjs.ConsumerConfig {
	t.Helper()
	c, err := b.JetStream().Consumer(t.Context(), jetbus.StreamName(topic), jetbus.ConsumerName(group, p))
	require.NoError(t, err)
	return c.CachedInfo().Config
}

// fill creates topic (one partition) and publishes n events to it.
func fill(t *testing.T, b *jbjs.Bus, topic string, n int) {
	t.Helper()
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: topic}))
	for i := range n {
		_, err := b.Publish(t.Context(), topic, i)
		require.NoError(t, err)
	}
}

// holding wraps h so that every call waits for release to be closed; started is closed at
// the first call.
func holding(h jetbus.Handler) (wrapped jetbus.Handler, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, d *jetbus.Delivery) error {
		once.Do(func() { close(started) })
		<-release
		return h(ctx, d)
	}, started, release
}

// An unordered group's consumers have no priority policy and say they are unordered; an
// ordered group's are pinned.
func TestUnorderedConsumerIsNotPinned(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "cfg", Partitions: 2}))
	noop := func(context.Context, *jetbus.Delivery) error { return nil }
	u, err := b.Subscribe(ctx, "cfg", "u", noop, jetbus.Unordered())
	require.NoError(t, err)
	defer u.Stop()
	o, err := b.Subscribe(ctx, "cfg", "o", noop)
	require.NoError(t, err)
	defer o.Stop()
	for p := range 2 {
		cfg := consumerConfig(t, b, "cfg", "u", p)
		assert.Equal(t, natsjs.PriorityPolicyNone, cfg.PriorityPolicy)
		assert.Empty(t, cfg.PriorityGroups)
		assert.Equal(t, "true", cfg.Metadata[jetbus.MetaUnordered])
		cfg = consumerConfig(t, b, "cfg", "o", p)
		assert.Equal(t, natsjs.PriorityPolicyPinned, cfg.PriorityPolicy)
		assert.Equal(t, []string{jetbus.PriorityGroup}, cfg.PriorityGroups)
		assert.NotContains(t, cfg.Metadata, jetbus.MetaUnordered)
	}
}

// A group is ordered or unordered: a subscriber of the other kind is refused, running members
// or not, and the group's consumers and members are left as they were.
func TestOrderedAndUnorderedDoNotMix(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	other := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "mix", Partitions: 2}))
	ro, ru := newAttemptRecorder(), newAttemptRecorder()
	so, err := b.Subscribe(ctx, "mix", "o", ro.handler)
	require.NoError(t, err)
	defer so.Stop()
	su, err := b.Subscribe(ctx, "mix", "u", ru.handler, jetbus.Unordered())
	require.NoError(t, err)
	defer su.Stop()

	_, err = other.Subscribe(ctx, "mix", "o", ru.handler, jetbus.Unordered())
	require.ErrorIs(t, err, jetbus.ErrInvalidOption)
	assert.ErrorContains(t, err, "group o is ordered")
	_, err = other.Subscribe(ctx, "mix", "u", ro.handler)
	require.ErrorIs(t, err, jetbus.ErrInvalidOption)
	assert.ErrorContains(t, err, "group u is unordered")
	_, err = other.SubscribePartition(ctx, "mix", "u", 0, ru.handler, jetbus.Unordered())
	require.ErrorIs(t, err, jetbus.ErrInvalidOption, "an unordered group has no partition to take over")

	// The members go on, their consumers unchanged.
	for p := range 2 {
		assert.Equal(t, natsjs.PriorityPolicyPinned, consumerConfig(t, b, "mix", "o", p).PriorityPolicy)
		assert.Equal(t, natsjs.PriorityPolicyNone, consumerConfig(t, b, "mix", "u", p).PriorityPolicy)
	}
	for range 10 {
		_, err := b.Publish(ctx, "mix", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return ro.distinct() == 10 && ru.distinct() == 10 }, 10*time.Second, 10*time.Millisecond)

	// With no member running, the consumers still say what the group is.
	require.NoError(t, so.Stop())
	require.NoError(t, su.Stop())
	_, err = other.Subscribe(ctx, "mix", "o", ru.handler, jetbus.Unordered())
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	_, err = other.Subscribe(ctx, "mix", "u", ro.handler)
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
}

// SetCursor gives a partition the group never consumed a consumer of the group's kind.
func TestSetCursorKeepsTheGroupUnordered(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTopicCacheTTL(0))
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "grow", Partitions: 2}))
	noop := func(context.Context, *jetbus.Delivery) error { return nil }
	sub, err := b.Subscribe(ctx, "grow", "u", noop, jetbus.Unordered())
	require.NoError(t, err)
	require.NoError(t, sub.Stop())
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "grow", Partitions: 3}))
	require.NoError(t, b.SetCursor(ctx, "grow", "u", jetbus.Earliest()))
	cfg := consumerConfig(t, b, "grow", "u", 2)
	assert.Equal(t, natsjs.PriorityPolicyNone, cfg.PriorityPolicy)
	assert.Equal(t, "true", cfg.Metadata[jetbus.MetaUnordered])
	sub, err = b.Subscribe(ctx, "grow", "u", noop, jetbus.Unordered())
	require.NoError(t, err)
	require.NoError(t, sub.Stop())

	// A group SetCursor creates from nothing is ordered, the default.
	require.NoError(t, b.SetCursor(ctx, "grow", "fresh", jetbus.Earliest()))
	assert.Equal(t, natsjs.PriorityPolicyPinned, consumerConfig(t, b, "grow", "fresh", 0).PriorityPolicy)
}

// A stopping member gives back at once what it fetched and did not start: another member gets
// it long before the ack timeout, as its next attempt.
func TestUnorderedStopGivesBack(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	const n = 20
	fill(t, admin, "back", n)
	opts := []jetbus.SubscribeOption{jetbus.Unordered(), jetbus.FromEarliest(), jetbus.AckTimeout(time.Minute)}
	a, b := newAttemptRecorder(), newAttemptRecorder()
	held, started, release := holding(a.handler)
	subA, err := embeddedtest.Bus(t, s.ClientURL()).Subscribe(ctx, "back", "g", held, append(opts, jetbus.BatchSize(n))...)
	require.NoError(t, err)
	<-started // every event is fetched by A: one in its handler, the others buffered
	subB, err := embeddedtest.Bus(t, s.ClientURL()).Subscribe(ctx, "back", "g", b.handler, opts...)
	require.NoError(t, err)
	defer subB.Stop()

	stopped := make(chan error, 1)
	go func() { stopped <- subA.Stop() }()
	require.Eventually(t, func() bool { return jbjs.Stopping(subA) }, 10*time.Second, time.Millisecond)
	close(release)
	require.NoError(t, <-stopped)

	require.Eventually(t, func() bool { return a.distinct()+b.distinct() == n }, 10*time.Second, 10*time.Millisecond,
		"the events A did not start reach B before their ack timeout")
	assert.Equal(t, 1, a.distinct(), "A handles the event it had started, nothing after its stop")
	for id, at := range b.snapshot() {
		assert.Equal(t, []int{2}, at, "event %s: given back once, delivered to B as its second attempt", id)
	}
	require.Eventually(t, func() bool {
		c, err := admin.Cursor(ctx, "back", "g")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond)
}

// A stopping member handles what it fetched on its last attempt instead of giving it back:
// after a nak the server would give up on events no handler saw.
func TestUnorderedStopHandlesLastAttempts(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	const n = 20
	fill(t, b, "last", n)
	r := newAttemptRecorder()
	held, started, release := holding(r.handler)
	sub, err := b.Subscribe(ctx, "last", "g", held, jetbus.Unordered(), jetbus.FromEarliest(), jetbus.BatchSize(n), jetbus.MaxAttempts(1))
	require.NoError(t, err)
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- sub.Stop() }()
	require.Eventually(t, func() bool { return jbjs.Stopping(sub) }, 10*time.Second, time.Millisecond)
	close(release)
	require.NoError(t, <-stopped)
	assert.Equal(t, n, r.distinct(), "every fetched event was on its last attempt: all handled")
	// Acks travel asynchronously: the server settles them shortly after Stop returns.
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "last", "g")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond, "all acknowledged")
}

// With Unordered, KeyConcurrency(n) handles n events at once whatever their keys.
func TestUnorderedKeyConcurrencyIgnoresKeys(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "kcu"}))
	const n = 4
	for i := range n {
		_, err := b.Publish(ctx, "kcu", i, jetbus.WithKey("one-key"))
		require.NoError(t, err)
	}
	var inFlight atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	r := newAttemptRecorder()
	sub, err := b.Subscribe(ctx, "kcu", "g", func(ctx context.Context, d *jetbus.Delivery) error {
		if inFlight.Add(1) == n {
			once.Do(func() { close(all) })
		}
		defer inFlight.Add(-1)
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			return jetbus.Permanent(errors.New("the events of one key were not handled at once"))
		}
		return r.handler(ctx, d)
	}, jetbus.Unordered(), jetbus.FromEarliest(), jetbus.KeyConcurrency(n))
	require.NoError(t, err)
	defer sub.Stop()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("at most %d of %d events of one key in flight", inFlight.Load(), n)
	}
	require.Eventually(t, func() bool { return r.distinct() == n }, 10*time.Second, 10*time.Millisecond)
}

// Drain handles everything the member fetched, however slow the handler is while it drains,
// and gives nothing back.
func TestUnorderedDrainHandlesWhatItFetched(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	const n = 20
	fill(t, b, "drain", n)
	r := newAttemptRecorder()
	held, started, release := holding(func(ctx context.Context, d *jetbus.Delivery) error {
		time.Sleep(30 * time.Millisecond) // the handler's own work, slower than a stop waits for quiet
		return r.handler(ctx, d)
	})
	sub, err := b.Subscribe(ctx, "drain", "g", held, jetbus.Unordered(), jetbus.FromEarliest(), jetbus.BatchSize(n))
	require.NoError(t, err)
	<-started
	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(ctx) }()
	require.Eventually(t, func() bool { return jbjs.Stopping(sub) }, 10*time.Second, time.Millisecond)
	close(release)
	require.NoError(t, <-drained)
	assert.Equal(t, n, r.distinct(), "every fetched event handled")
	for id, at := range r.snapshot() {
		assert.Equal(t, []int{1}, at, "event %s", id)
	}
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "drain", "g")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond, "all acknowledged, nothing given back")
}

// The acks an unordered pull holds back to send together reach the server within
// milliseconds, even while the next handler blocks.
func TestUnorderedAcksWhileHandlerBlocks(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "hold"}))
	const n = 20
	var pub []*jetbus.Event
	for i := range n {
		e, err := b.Publish(ctx, "hold", map[string]int{"n": i})
		require.NoError(t, err)
		pub = append(pub, e)
	}
	release := make(chan struct{})
	sub, err := b.Subscribe(ctx, "hold", "g", func(_ context.Context, d *jetbus.Delivery) error {
		if d.Seq == pub[5].Seq {
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		return nil
	}, jetbus.Unordered(), jetbus.FromEarliest(), jetbus.BatchSize(n))
	require.NoError(t, err)
	defer sub.Stop()
	defer close(release)
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "hold", "g")
		return err == nil && c.Partitions[0].AckFloor >= pub[4].Seq
	}, 10*time.Second, 5*time.Millisecond, "the events before the blocked one are acknowledged meanwhile")
}
