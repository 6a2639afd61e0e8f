package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

func streamMsgs(t *testing.T, b *jbjs.Bus, topic string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), jetbus.StreamName(topic))
	require.NoError(t, err)
	return s.CachedInfo().State.Msgs
}

func TestBadInput(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 2}))
	h := func(context.Context, *jetbus.Delivery) error { return nil }

	t.Run("topic names", func(t *testing.T) {
		for _, name := range []string{"", "Orders", "orders..x", "orders.", ".orders", "orders.p3", "dlq.orders", "in.orders", "orders x", "orders.*", "orders.>", "ørders", strings.Repeat("a", 201)} {
			_, err := b.Publish(ctx, name, 1)
			assert.ErrorIs(t, err, jetbus.ErrInvalidTopic, "publish %q", name)
			_, err = b.Subscribe(ctx, name, "g", h)
			assert.ErrorIs(t, err, jetbus.ErrInvalidTopic, "subscribe %q", name)
			assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: name}), jetbus.ErrInvalidTopic, "ensure %q", name)
		}
		for _, name := range []string{"orders", "orders.created", "orders.created.v2", "a1.b2", "x.p"} {
			assert.NoError(t, jetbus.ValidateTopic(name), name)
		}
	})
	t.Run("group names", func(t *testing.T) {
		for _, g := range []string{"", "a.b", "a b", "a*", "a>", "ü", strings.Repeat("g", 101)} {
			_, err := b.Subscribe(ctx, "orders", g, h)
			assert.ErrorIs(t, err, jetbus.ErrInvalidGroup, "group %q", g)
			_, err = b.Cursor(ctx, "orders", g)
			assert.ErrorIs(t, err, jetbus.ErrInvalidGroup, "cursor group %q", g)
			assert.ErrorIs(t, b.Ack(ctx, "orders", g, "id"), jetbus.ErrInvalidGroup)
		}
	})
	t.Run("payloads", func(t *testing.T) {
		_, err := b.Publish(ctx, "orders", make(chan int))
		assert.ErrorIs(t, err, jetbus.ErrInvalidPayload)
		_, err = b.Publish(ctx, "orders", json.RawMessage(`{"a":`))
		assert.ErrorIs(t, err, jetbus.ErrInvalidPayload)
		_, err = b.Publish(ctx, "orders", map[string]any{"f": func() {}})
		assert.ErrorIs(t, err, jetbus.ErrInvalidPayload)
		_, err = b.PublishAsync(ctx, "orders", make(chan int))
		assert.ErrorIs(t, err, jetbus.ErrInvalidPayload)
	})
	t.Run("headers", func(t *testing.T) {
		for _, name := range []string{"trace", "X-Trace", "x-", "x_trace", "x-key", "x-ts", "Nats-Msg-Id"} {
			_, err := b.Publish(ctx, "orders", 1, jetbus.WithHeaders(map[string]string{name: "v"}))
			assert.ErrorIs(t, err, jetbus.ErrInvalidHeader, "header %q", name)
		}
		_, err := b.Publish(ctx, "orders", 1, jetbus.WithTags("a,b"))
		assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	})
	t.Run("too large", func(t *testing.T) {
		big := json.RawMessage(`"` + strings.Repeat("x", int(b.Conn().MaxPayload())) + `"`)
		_, err := b.Publish(ctx, "orders", big)
		assert.ErrorIs(t, err, jetbus.ErrMessageTooLarge)
		_, err = b.PublishAsync(ctx, "orders", big)
		assert.ErrorIs(t, err, jetbus.ErrMessageTooLarge)
		// Just under the limit with headers counted fails too, rather than half-sending.
		edge := json.RawMessage(`"` + strings.Repeat("x", int(b.Conn().MaxPayload())-40) + `"`)
		_, err = b.Publish(ctx, "orders", edge)
		assert.ErrorIs(t, err, jetbus.ErrMessageTooLarge)
	})
	t.Run("missing topic", func(t *testing.T) {
		_, err := b.Publish(ctx, "nosuch.topic", 1)
		assert.ErrorIs(t, err, jetbus.ErrTopicNotFound)
		_, err = b.Subscribe(ctx, "nosuch.topic", "g", h)
		assert.ErrorIs(t, err, jetbus.ErrTopicNotFound)
		_, err = b.Subscribe(ctx, "orders", "g", h, jetbus.FanIn("nosuch.topic"))
		assert.ErrorIs(t, err, jetbus.ErrTopicNotFound)
		_, err = b.Partitions(ctx, "nosuch.topic")
		assert.ErrorIs(t, err, jetbus.ErrTopicNotFound)
		assert.ErrorIs(t, b.SetCursor(ctx, "nosuch.topic", "g", jetbus.Earliest()), jetbus.ErrTopicNotFound)
		assert.ErrorIs(t, b.DeleteTopic(ctx, "nosuch.topic"), jetbus.ErrTopicNotFound)
	})
	t.Run("options", func(t *testing.T) {
		for name, o := range map[string]jetbus.SubscribeOption{
			"batch": jetbus.BatchSize(0), "inflight": jetbus.MaxInFlight(-1), "attempts": jetbus.MaxAttempts(0),
			"ack": jetbus.AckTimeout(0), "backoff": jetbus.Backoff(nil), "afterid": jetbus.AfterID(""),
			"fanin": jetbus.FanIn("Bad"),
		} {
			_, err := b.Subscribe(ctx, "orders", "g", h, o)
			if name == "fanin" {
				assert.ErrorIs(t, err, jetbus.ErrInvalidTopic, name)
				continue
			}
			assert.ErrorIs(t, err, jetbus.ErrInvalidOption, name)
		}
		_, err := b.Subscribe(ctx, "orders", "g", nil)
		assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
		for name, p := range map[string]int{"negative": -1, "beyond the count": 2} {
			_, err = b.SubscribePartition(ctx, "orders", "g", p, h)
			assert.ErrorIs(t, err, jetbus.ErrInvalidOption, "partition %s", name)
		}
		_, err = b.SubscribePartition(ctx, "orders", "g", 0, h, jetbus.FanIn("payments"))
		assert.ErrorIs(t, err, jetbus.ErrInvalidOption, "fan-in of one partition")
		assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 1}), jbjs.ErrInvalidConfig, "shrink")
		assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "x", Partitions: -1}), jbjs.ErrInvalidConfig)
		assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "x", Partitions: jbjs.MaxPartitions + 1}), jetbus.ErrInvalidConfig)
		_, err = b.Publish(ctx, "orders", 1, jetbus.WithID(""))
		assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	})
	// Nothing above reached the stream.
	assert.Equal(t, uint64(0), streamMsgs(t, b, "orders"))

	t.Run("closed", func(t *testing.T) {
		b2 := embeddedtest.Bus(t, s.ClientURL())
		require.NoError(t, b2.Close())
		_, err := b2.Publish(ctx, "orders", 1)
		assert.ErrorIs(t, err, jetbus.ErrClosed)
		_, err = b2.Subscribe(ctx, "orders", "g", h)
		assert.ErrorIs(t, err, jetbus.ErrClosed)
	})
}

func TestWireFormat(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders.created", Partitions: 8}))

	info, err := b.JetStream().Stream(ctx, "orders_created")
	require.NoError(t, err, "stream named by replacing dots")
	cfg := info.CachedInfo().Config
	assert.Equal(t, "8", cfg.Metadata[jetbus.MetaPartitions])
	assert.Equal(t, "orders.created", cfg.Metadata[jetbus.MetaTopic])
	assert.Len(t, cfg.Subjects, 8)
	assert.Equal(t, "orders.created.p0", cfg.Subjects[0])

	e, err := b.Publish(ctx, "orders.created", map[string]int{"n": 1}, jetbus.WithKey("user-42"), jetbus.WithTags("a", "b"), jetbus.WithCausedBy("c"))
	require.NoError(t, err)
	assert.Equal(t, jetbus.PartitionOf("user-42", 8), e.Partition)
	raw, err := info.GetMsg(ctx, e.Seq)
	require.NoError(t, err)
	assert.Equal(t, "orders.created.p0", raw.Subject, "Of(user-42, 8) = 0 per the vectors")
	assert.Equal(t, e.ID, raw.Header.Get("Nats-Msg-Id"))
	assert.Equal(t, "user-42", raw.Header.Get("x-key"))
	assert.Equal(t, "a,b", raw.Header.Get("x-tags"))
	assert.Equal(t, "c", raw.Header.Get("x-caused-by"))
	assert.Equal(t, "application/json", raw.Header.Get("content-type"))
	assert.NotEmpty(t, raw.Header.Get("x-ts"))
	assert.JSONEq(t, `{"n":1}`, string(raw.Data))

	// Without a key, the event ID picks the partition.
	e2, err := b.Publish(ctx, "orders.created", 1)
	require.NoError(t, err)
	assert.Equal(t, jetbus.PartitionOf(e2.ID, 8), e2.Partition)

	// A publish to a partition beyond the topic's is refused by the server.
	_, err = b.JetStream().Publish(ctx, "orders.created.p8", []byte("1"))
	assert.Error(t, err)
}

func TestForeignPublisher(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "plain", Partitions: 2}))
	nc := embeddedtest.Connect(t, s.ClientURL())
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	before := time.Now().Add(-time.Second)
	ack, err := js.Publish(ctx, "plain.p1", []byte(`{"hello":"world"}`))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "plain.p0", []byte(`not json`))
	require.NoError(t, err)

	var mu sync.Mutex
	var got []*jetbus.Delivery
	sub, err := b.Subscribe(ctx, "plain", "g", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "plain", "g")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "the undecodable body never reaches the handler")
	d := got[0]
	assert.Equal(t, "plain:"+jsonNum(ack.Sequence), d.ID)
	assert.Equal(t, "plain", d.Topic)
	assert.Equal(t, 1, d.Partition)
	assert.True(t, d.TS.After(before), "TS from the stream")
	assert.JSONEq(t, `{"hello":"world"}`, string(d.Payload))

	// AfterID accepts the fallback IDs.
	seen := make(chan string, 4)
	sub2, err := b.Subscribe(ctx, "plain", "g2", func(_ context.Context, d *jetbus.Delivery) error { seen <- d.ID; return nil }, jetbus.AfterID("plain:1"))
	require.NoError(t, err)
	defer sub2.Stop()
	_, err = js.Publish(ctx, "plain.p0", []byte(`2`))
	require.NoError(t, err)
	select {
	case id := <-seen:
		assert.Equal(t, "plain:3", id)
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery after plain:1")
	}
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestDecodeFailureIsPermanent(t *testing.T) {
	s := embeddedtest.NATS(t)
	var seen []error
	var mu sync.Mutex
	mw := func(next jetbus.Handler) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			err := next(ctx, d)
			mu.Lock()
			seen = append(seen, err)
			mu.Unlock()
			return err
		}
	}
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithHandlerMiddleware(mw))
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "bad"}))
	require.NoError(t, b.Conn().Publish("bad.p0", []byte("{{")))
	sub, err := b.Subscribe(ctx, "bad", "g", func(context.Context, *jetbus.Delivery) error {
		t.Error("handler called with an undecodable body")
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.ErrorIs(t, seen[0], jetbus.ErrDecode)
	assert.True(t, jetbus.IsPermanent(seen[0]))
}

func TestPublishMiddlewareAndAsync(t *testing.T) {
	s := embeddedtest.NATS(t)
	stamp := func(next jetbus.PublishFunc) jetbus.PublishFunc {
		return func(ctx context.Context, e *jetbus.Event) error {
			e.SetHeader("x-stamped", "yes")
			return next(ctx, e)
		}
	}
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPublishMiddleware(stamp))
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "mw", Partitions: 3}))
	var futs []jetbus.PublishFuture
	for i := range 50 {
		f, err := b.PublishAsync(ctx, "mw", i, jetbus.WithKey("k"))
		require.NoError(t, err)
		futs = append(futs, f)
	}
	var last uint64
	for _, f := range futs {
		e, err := f.Wait(ctx)
		require.NoError(t, err)
		assert.Greater(t, e.Seq, last, "async publishes of one key are stored in order")
		last = e.Seq
	}
	raw, err := b.JetStream().Stream(ctx, "mw")
	require.NoError(t, err)
	m, err := raw.GetMsg(ctx, last)
	require.NoError(t, err)
	assert.Equal(t, "yes", m.Header.Get("x-stamped"))
}

func TestMetrics(t *testing.T) {
	s := embeddedtest.NATS(t)
	reg := prometheus.NewRegistry()
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithRegisterer(reg))
	b2 := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithRegisterer(reg)) // shares the collectors
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "m"}))
	fail := true
	var mu sync.Mutex
	sub, err := b2.Subscribe(ctx, "m", "g", func(context.Context, *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return jetbus.Permanent(assert.AnError)
		}
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	for range 3 {
		_, err := b.Publish(ctx, "m", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "events_acked_total") == 2 && metricValue(t, reg, "events_nacked_total") == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 3.0, metricValue(t, reg, "events_published_total"))
	assert.Equal(t, 3.0, metricValue(t, reg, "events_delivered_total"))
	assert.Equal(t, 0.0, metricValue(t, reg, "events_inflight"))
	assert.Equal(t, 3.0, metricValue(t, reg, "delivery_handler_duration_ms"))
	assert.GreaterOrEqual(t, metricValue(t, reg, "subscribe_poll_duration_ms"), 3.0)
}

// metricValue sums a metric's samples (histograms: their counts).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// A middleware that sends an event elsewhere is held to the same name rules.
func TestMiddlewareTopicIsValidated(t *testing.T) {
	s := embeddedtest.NATS(t)
	redirect := func(next jetbus.PublishFunc) jetbus.PublishFunc {
		return func(ctx context.Context, e *jetbus.Event) error {
			cp := *e
			cp.Topic = "Not.Valid"
			return next(ctx, &cp)
		}
	}
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPublishMiddleware(redirect))
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "src"}))
	_, err := b.Publish(ctx, "src", 1)
	assert.ErrorIs(t, err, jetbus.ErrInvalidTopic)
}

// A subscription whose connection is closed ends by itself with ErrClosed, and Stop returns.
func TestSubscriptionEndsWhenConnectionCloses(t *testing.T) {
	t.Run("ordered", func(t *testing.T) { testSubscriptionEndsWhenConnectionCloses(t) })
	t.Run("unordered", func(t *testing.T) { testSubscriptionEndsWhenConnectionCloses(t, jetbus.Unordered()) })
}

// The connection may close at any moment of a subscription's start, also while a partition
// opens its pull. nats.go's iterator learns of a close through a handler it installs just
// after subscribing its inbox: a close in between leaves it waiting for good, and only the
// partition's own check after the pull opened ends it (pull.go, run). Each round closes the
// connection after a different delay (the fault's timing, not a wait), so that some land in
// that window. The window is narrow: without the check, about one run of this test in four
// fails (a round hangs), so it raises the odds rather than failing every time.
func TestSubscriptionEndsWhenConnectionClosesWhileStarting(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := context.Background()
	admin := embeddedtest.Bus(t, s.ClientURL())
	const partitions = 8
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "gone", Partitions: partitions}))
	rounds := 200
	if testing.Short() {
		rounds = 30
	}
	for i := range rounds {
		nc := embeddedtest.Connect(t, s.ClientURL())
		b, err := jbjs.Open(ctx, nc)
		require.NoError(t, err)
		group := fmt.Sprintf("g%d", i)
		sub, err := b.Subscribe(ctx, "gone", group, func(context.Context, *jetbus.Delivery) error { return nil })
		require.NoError(t, err)
		time.Sleep(600*time.Microsecond + time.Duration(i%100)*20*time.Microsecond) // where the pulls open
		nc.Close()
		select {
		case <-sub.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: subscription still running 10 s after its connection closed", i)
		}
		require.ErrorIs(t, sub.Err(), jetbus.ErrClosed, "round %d", i)
		for p := range partitions { // a stream holds a bounded number of consumers
			err := admin.JetStream().DeleteConsumer(ctx, jetbus.StreamName("gone"), jetbus.ConsumerName(group, p))
			if !errors.Is(err, natsjs.ErrConsumerNotFound) {
				require.NoError(t, err)
			}
		}
	}
}

func testSubscriptionEndsWhenConnectionCloses(t *testing.T, opts ...jetbus.SubscribeOption) {
	s := embeddedtest.NATS(t)
	ctx := context.Background()
	admin := embeddedtest.Bus(t, s.ClientURL())
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "gone", Partitions: 4}))
	nc := embeddedtest.Connect(t, s.ClientURL())
	b, err := jbjs.Open(ctx, nc)
	require.NoError(t, err)
	sub, err := b.Subscribe(ctx, "gone", "g", func(context.Context, *jetbus.Delivery) error { return nil }, append(opts, jetbus.FromEarliest())...)
	require.NoError(t, err)
	_, err = admin.Publish(ctx, "gone", 1)
	require.NoError(t, err)
	nc.Close()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription still running after its connection closed")
	}
	assert.ErrorIs(t, sub.Err(), jetbus.ErrClosed)
	done := make(chan struct{})
	go func() { _ = sub.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
}
