package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

const wait = 15 * time.Second

type env struct {
	t   *testing.T
	srv *server.Server
	bus *jbjs.Bus
	q   *dlq.Queue
	reg *prometheus.Registry
}

// newEnv opens a Queue with cfg (and opts, after the test's logger and registry) on a server
// of its own.
func newEnv(t *testing.T, cfg dlq.Config, opts ...dlq.Option) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	return newEnvOn(t, s, cfg, opts...)
}

func newEnvOn(t *testing.T, s *server.Server, cfg dlq.Config, opts ...dlq.Option) *env {
	t.Helper()
	ctx := context.Background()
	nc := embeddedtest.Connect(t, s.ClientURL())
	reg := prometheus.NewRegistry()
	// The queue needs the JetStream context before the Bus exists: open a bare Bus first.
	bare, err := jbjs.Open(ctx, nc)
	require.NoError(t, err)
	q, err := dlq.Open(ctx, bare.JetStream(), cfg, append([]dlq.Option{dlq.WithRegisterer(reg), dlq.WithLogger(embeddedtest.Logger(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	bus, err := jbjs.Open(ctx, nc, jbjs.WithHandlerMiddleware(q.Middleware()), jbjs.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bus.Close() })
	return &env{t: t, srv: s, bus: bus, q: q, reg: reg}
}

func (e *env) topic(name string, partitions int) {
	require.NoError(e.t, e.bus.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: name, Partitions: partitions}))
}

func (e *env) count(f dlq.Filter) int {
	n, err := e.q.Count(context.Background(), f)
	require.NoError(e.t, err)
	return n
}

func (e *env) lag(topic, group string) uint64 {
	c, err := e.bus.Cursor(context.Background(), topic, group)
	if err != nil {
		return 1 << 62
	}
	return c.Lag()
}

var fast = jetbus.Backoff(jetbus.ExponentialBackoff(5*time.Millisecond, 20*time.Millisecond))

type body struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func TestPoisonLandsAfterMaxAttempts(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("orders", 2)
	ctx := context.Background()
	attempts := 0
	var mu sync.Mutex
	sub, err := e.bus.Subscribe(ctx, "orders", "billing", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		attempts++
		mu.Unlock()
		return fmt.Errorf("boom %d", d.Attempt)
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(3), fast)
	require.NoError(t, err)
	defer sub.Stop()
	ev, err := e.bus.Publish(ctx, "orders", body{Key: "a", N: 1}, jetbus.WithKey("a"),
		jetbus.WithHeaders(map[string]string{"x-trace": "t1"}), jetbus.WithTags("x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 1 && e.lag("orders", "billing") == 0 }, wait, 10*time.Millisecond)
	mu.Lock()
	assert.Equal(t, 3, attempts)
	mu.Unlock()

	ls, err := e.q.List(ctx, dlq.Filter{Topic: "orders"}, 0)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	l := ls[0]
	assert.Equal(t, "orders", l.Topic)
	assert.Equal(t, "billing", l.Group)
	assert.Equal(t, dlq.ReasonMaxAttempts, l.Reason)
	assert.Equal(t, "boom 3", l.Error)
	assert.Equal(t, 3, l.Attempts)
	assert.Equal(t, fmt.Sprintf("orders.p%d", ev.Partition), l.OriginalSubject)
	assert.Equal(t, "orders", l.OriginalStream)
	assert.Equal(t, ev.Seq, l.OriginalSeq)
	assert.Equal(t, ev.ID, l.OriginalID)
	assert.Equal(t, "a", l.Key)
	assert.WithinDuration(t, time.Now(), l.TS, time.Minute)
	assert.JSONEq(t, `{"key":"a","n":1}`, string(l.Body))
	// The original body and headers are kept.
	assert.Equal(t, "t1", l.Header.Get("x-trace"))
	assert.Equal(t, "x", l.Header.Get("x-tags"))
	assert.Equal(t, strconv.FormatInt(ev.TS.UnixMilli(), 10), l.Header.Get("x-ts"))
	for _, h := range []string{dlq.HeaderReason, dlq.HeaderError, dlq.HeaderGroup, dlq.HeaderAttempts,
		dlq.HeaderOriginalSubject, dlq.HeaderOriginalStream, dlq.HeaderOriginalSeq, dlq.HeaderTS} {
		assert.NotEmpty(t, l.Header.Get(h), h)
	}
	shown, err := e.q.Show(ctx, l.Seq)
	require.NoError(t, err)
	assert.Equal(t, l.OriginalID, shown.OriginalID)
	_, err = e.q.Show(ctx, 9999)
	assert.ErrorIs(t, err, dlq.ErrNotFound)
	assert.Equal(t, 1.0, metric(t, e.reg, "dlq_dead_letters_total"))
}

func TestPermanentLandsAtOnceAndDecodeFailures(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("pay", 1)
	ctx := context.Background()
	calls := map[int]int{}
	var mu sync.Mutex
	sub, err := e.bus.Subscribe(ctx, "pay", "g", func(_ context.Context, d *jetbus.Delivery) error {
		var b body
		require.NoError(t, json.Unmarshal(d.Payload, &b))
		mu.Lock()
		calls[b.N]++
		mu.Unlock()
		if b.N == 1 {
			return jetbus.Permanent(errors.New("invalid card"))
		}
		return nil
	}, jetbus.FromEarliest(), fast)
	require.NoError(t, err)
	defer sub.Stop()
	_, err = e.bus.Publish(ctx, "pay", body{N: 1})
	require.NoError(t, err)
	require.NoError(t, e.bus.Conn().Publish("pay.p0", []byte("{not json")))
	_, err = e.bus.Publish(ctx, "pay", body{N: 2})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 2 && e.lag("pay", "g") == 0 }, wait, 10*time.Millisecond)
	mu.Lock()
	assert.Equal(t, map[int]int{1: 1, 2: 1}, calls, "permanent: one attempt; undecodable: never handled")
	mu.Unlock()
	perm, err := e.q.List(ctx, dlq.Filter{Reason: dlq.ReasonPermanent}, 0)
	require.NoError(t, err)
	require.Len(t, perm, 1)
	assert.Equal(t, 1, perm[0].Attempts)
	assert.Contains(t, perm[0].Error, "invalid card")
	dec, err := e.q.List(ctx, dlq.Filter{Reason: dlq.ReasonDecode}, 0)
	require.NoError(t, err)
	require.Len(t, dec, 1)
	assert.Equal(t, "{not json", string(dec[0].Body))
	assert.Equal(t, "pay:2", dec[0].OriginalID)
}

// With the DLQ stream gone, a failing event is neither acknowledged nor lost: the server
// stops delivering it after MaxAttempts, the safety net keeps its advisory, and it lands in
// the DLQ once the stream is back.
func TestDLQUnavailable(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("ship", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-swept }()

	require.NoError(t, e.bus.JetStream().DeleteStream(ctx, dlq.StreamName))
	var mu sync.Mutex
	attempts := 0
	sub, err := e.bus.Subscribe(ctx, "ship", "g", func(context.Context, *jetbus.Delivery) error {
		mu.Lock()
		attempts++
		mu.Unlock()
		return errors.New("broken")
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(3), fast)
	require.NoError(t, err)
	defer sub.Stop()
	ev, err := e.bus.Publish(ctx, "ship", body{N: 7})
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return attempts == 3 }, wait, 10*time.Millisecond)
	// Not acknowledged: the consumer's ack floor has not passed it, and it is still stored.
	c, err := e.bus.Cursor(ctx, "ship", "g")
	require.NoError(t, err)
	assert.Less(t, c.Partitions[0].AckFloor, ev.Seq)
	adv, err := e.bus.JetStream().Stream(ctx, dlq.AdvisoryStreamName)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		i, err := adv.Info(ctx)
		return err == nil && i.State.Msgs == 1
	}, wait, 10*time.Millisecond, "the advisory waits for the DLQ")

	require.NoError(t, e.q.Ensure(ctx)) // the DLQ is back
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 1 }, wait, 10*time.Millisecond)
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	assert.Equal(t, ev.ID, ls[0].OriginalID)
	assert.Equal(t, dlq.ReasonMaxDeliveries, ls[0].Reason)
	assert.Equal(t, 3, ls[0].Attempts)
	assert.Equal(t, "g", ls[0].Group)
}

// A handler that never returns: the server redelivers after the ack timeout until
// MaxAttempts, then the safety net moves the message.
func TestAdvisoryMovesHungHandlerMessage(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("hang", 1)
	ctx, cancel := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-swept }()
	release := make(chan struct{})
	sub, err := e.bus.Subscribe(ctx, "hang", "g", func(context.Context, *jetbus.Delivery) error {
		<-release
		return nil
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(2), jetbus.AckTimeout(100*time.Millisecond))
	require.NoError(t, err)
	ev, err := e.bus.Publish(ctx, "hang", body{N: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{Reason: dlq.ReasonMaxDeliveries}) == 1 }, wait, 10*time.Millisecond)
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	assert.Equal(t, ev.ID, ls[0].OriginalID)
	assert.Equal(t, 2, ls[0].Attempts)
	close(release)
	require.NoError(t, sub.Stop())
}

func TestReplayRoundTrip(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("mail", 2)
	ctx := context.Background()
	var mu sync.Mutex
	fixed := false
	var handled []*jetbus.Delivery
	sub, err := e.bus.Subscribe(ctx, "mail", "sender", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return jetbus.Permanent(errors.New("smtp down"))
		}
		handled = append(handled, d)
		return nil
	}, jetbus.FromEarliest(), fast)
	require.NoError(t, err)
	defer sub.Stop()
	// Another group is healthy: it must not see replays meant for "sender".
	var otherN int
	other, err := e.bus.Subscribe(ctx, "mail", "audit", func(context.Context, *jetbus.Delivery) error {
		mu.Lock()
		otherN++
		mu.Unlock()
		return nil
	}, jetbus.FromEarliest(), fast)
	require.NoError(t, err)
	defer other.Stop()

	var pub []*jetbus.Event
	for i := range 5 {
		ev, err := e.bus.Publish(ctx, "mail", body{N: i}, jetbus.WithKey(fmt.Sprint("k", i%2)))
		require.NoError(t, err)
		pub = append(pub, ev)
	}
	require.Eventually(t, func() bool { return e.count(dlq.Filter{Group: "sender"}) == 5 }, wait, 10*time.Millisecond)

	dry, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Group: "sender"}, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, 5, dry.Selected)
	assert.Equal(t, 0, dry.Replayed)
	assert.Equal(t, 5, e.count(dlq.Filter{}), "dry run changes nothing")

	mu.Lock()
	fixed = true
	mu.Unlock()
	var progress []dlq.ReplayProgress
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Group: "sender"},
		Progress: func(p dlq.ReplayProgress) { progress = append(progress, p) }})
	require.NoError(t, err)
	assert.Equal(t, 5, rep.Replayed)
	assert.Empty(t, rep.Failed)
	assert.Len(t, progress, 5)
	assert.Equal(t, dlq.ReplayProgress{Done: 5, Total: 5}, progress[4])
	assert.Equal(t, 0, e.count(dlq.Filter{}), "the DLQ is empty")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 5 }, wait, 10*time.Millisecond)
	mu.Lock()
	for i, d := range handled {
		_ = i
		require.Len(t, d.CausedBy, 1)
		assert.Contains(t, []string{pub[0].ID, pub[1].ID, pub[2].ID, pub[3].ID, pub[4].ID}, d.CausedBy[0])
		assert.True(t, strings.HasPrefix(d.ID, "replay:"), "a replay ID: %s", d.ID)
	}
	mu.Unlock()

	// Again: nothing to replay, nothing changes.
	again, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Group: "sender"}})
	require.NoError(t, err)
	assert.Equal(t, 0, again.Replayed)
	require.Eventually(t, func() bool { return e.lag("mail", "sender") == 0 && e.lag("mail", "audit") == 0 }, wait, 10*time.Millisecond)
	mu.Lock()
	assert.Len(t, handled, 5)
	assert.Equal(t, 5, otherN, "the healthy group saw each original once and no replay")
	mu.Unlock()
	assert.Equal(t, 5.0, metric(t, e.reg, "dlq_replayed_total"))
}

// Republishing the same dead letter twice (a crash between the republish and the removal)
// stores one event.
func TestReplayIsIdempotent(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("idem", 1)
	ctx := context.Background()
	sub, err := e.bus.Subscribe(ctx, "idem", "g", func(context.Context, *jetbus.Delivery) error {
		return jetbus.Permanent(errors.New("no"))
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	_, err = e.bus.Publish(ctx, "idem", body{N: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 1 }, wait, 10*time.Millisecond)
	require.NoError(t, sub.Stop())
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	first, err := e.bus.Publish(ctx, "idem", ls[0].Body, jetbus.WithDerivedID(dlq.ReplayID(ls[0]))) // a replay that crashed before removing the letter
	require.NoError(t, err)
	var events []*jetbus.Event
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{OnLetter: func(_ *dlq.Letter, ev *jetbus.Event, _ error) { events = append(events, ev) }})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	assert.Equal(t, first.Seq, events[0].Seq, "the second republish is the same stored event")
}

func TestReplayTransformFilterLimitDiscard(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("tx", 1)
	ctx := context.Background()
	sub, err := e.bus.Subscribe(ctx, "tx", "g", func(_ context.Context, d *jetbus.Delivery) error {
		return jetbus.Permanent(errors.New("bad"))
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	for i := range 4 {
		_, err := e.bus.Publish(ctx, "tx", body{N: i}, jetbus.WithKey(fmt.Sprint("k", i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 4 }, wait, 10*time.Millisecond)
	require.NoError(t, sub.Stop())

	var events []*jetbus.Event
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Limit: 1, Transform: func(l *dlq.Letter) (json.RawMessage, error) {
		return json.RawMessage(`{"fixed":true}`), nil
	}, OnLetter: func(_ *dlq.Letter, ev *jetbus.Event, _ error) { events = append(events, ev) }})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	assert.JSONEq(t, `{"fixed":true}`, string(events[0].Payload))
	rep, err = e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Key: "k1"}, Transform: func(*dlq.Letter) (json.RawMessage, error) {
		return nil, errors.New("cannot fix")
	}})
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Replayed)
	assert.Len(t, rep.Failed, 1, "a failed transform keeps the letter")
	assert.Equal(t, 3, e.count(dlq.Filter{}))
	n, err := e.q.Discard(ctx, dlq.Filter{Key: "k2"}, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, 2, e.count(dlq.Filter{}))
	assert.Equal(t, 0, e.count(dlq.Filter{Since: time.Now().Add(time.Hour)}))
	assert.Equal(t, 2, e.count(dlq.Filter{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}))
}

func TestBadFilters(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	ctx := context.Background()
	for name, f := range map[string]dlq.Filter{
		"topic": {Topic: "Bad Topic"},
		"group": {Group: "a.b"},
		"range": {Since: time.Now(), Until: time.Now().Add(-time.Second)},
	} {
		_, err := e.q.List(ctx, f, 0)
		assert.ErrorIs(t, err, dlq.ErrInvalidFilter, name)
		_, err = e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: f})
		assert.ErrorIs(t, err, dlq.ErrInvalidFilter, name)
		_, err = e.q.Discard(ctx, f, 0)
		assert.ErrorIs(t, err, dlq.ErrInvalidFilter, name)
	}
	_, err := dlq.Open(ctx, e.bus.JetStream(), dlq.Config{Replicas: 9})
	assert.Error(t, err)
}

// With parking, a key's later events wait behind its dead letter, and replay restores the
// key's order.
func TestParkingKeepsPerKeyOrder(t *testing.T) {
	e := newEnv(t, dlq.Config{Parking: true})
	e.topic("acct", 2)
	ctx := context.Background()
	var mu sync.Mutex
	broken := true
	var got []body
	sub, err := e.bus.Subscribe(ctx, "acct", "ledger", func(_ context.Context, d *jetbus.Delivery) error {
		var b body
		require.NoError(t, json.Unmarshal(d.Payload, &b))
		mu.Lock()
		defer mu.Unlock()
		if broken && b.Key == "a" && b.N == 2 {
			return jetbus.Permanent(errors.New("ledger rejects"))
		}
		got = append(got, b)
		return nil
	}, jetbus.FromEarliest(), fast)
	require.NoError(t, err)
	defer sub.Stop()
	// Interleaved keys: a0 b1 a2 b3 a4 b5 … a2 fails.
	for i := range 12 {
		k := []string{"a", "b"}[i%2]
		_, err := e.bus.Publish(ctx, "acct", body{Key: k, N: i}, jetbus.WithKey(k))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return e.count(dlq.Filter{}) == 5 && len(got) == 7 && e.lag("acct", "ledger") == 0
	}, wait, 10*time.Millisecond, "a2 dead, a4..a10 parked, a0 and every b handled")
	parked, err := e.q.ParkedKeys(ctx, "ledger", "acct")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, parked)
	reasons, err := e.q.List(ctx, dlq.Filter{Key: "a"}, 0)
	require.NoError(t, err)
	assert.Equal(t, dlq.ReasonPermanent, reasons[0].Reason)
	for _, l := range reasons[1:] {
		assert.Equal(t, dlq.ReasonParked, l.Reason)
	}
	// A new event of the key while it is parked goes behind too.
	_, err = e.bus.Publish(ctx, "acct", body{Key: "a", N: 12}, jetbus.WithKey("a"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 6 }, wait, 10*time.Millisecond)

	mu.Lock()
	broken = false
	mu.Unlock()
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Group: "ledger"}})
	require.NoError(t, err)
	require.Equal(t, 6, rep.Replayed)
	_, err = e.bus.Publish(ctx, "acct", body{Key: "a", N: 13}, jetbus.WithKey("a"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 14 }, wait, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	var a []int
	for _, b := range got {
		if b.Key == "a" {
			a = append(a, b.N)
		}
	}
	assert.Equal(t, []int{0, 2, 4, 6, 8, 10, 12, 13}, a, "key a keeps its order across the failure")
	parked, err = e.q.ParkedKeys(ctx, "ledger", "acct")
	require.NoError(t, err)
	assert.Empty(t, parked)
	assert.Equal(t, 0, e.count(dlq.Filter{}))
}

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if m.Counter != nil {
					sum += m.Counter.GetValue()
				} else if m.Gauge != nil {
					sum += m.Gauge.GetValue()
				}
			}
		}
	}
	return sum
}
