package schema_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// process is one service: its own NATS connection, registry and Bus.
type process struct {
	nc  *nats.Conn
	reg *schema.Registry
	bus *jbjs.Bus
}

func startProcess(t *testing.T, url string, regOpts []schema.Option, dualWrite bool) *process {
	t.Helper()
	nc := embeddedtest.Connect(t, url)
	reg := openRegistry(t, nc, regOpts...)
	mws := []jetbus.PublishMiddleware{reg.PublishMiddleware()}
	if dualWrite {
		mws = append(mws, reg.DualWriteMiddleware())
	}
	bus, err := jbjs.Open(ctxT(t), nc, jbjs.WithPublishMiddleware(mws...), jbjs.WithHandlerMiddleware(reg.UpcastMiddleware()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bus.Close() })
	return &process{nc: nc, reg: reg, bus: bus}
}

// collector is a handler that keeps what it is given.
type collector struct {
	mu     sync.Mutex
	events []*jetbus.Event
}

func (c *collector) handle(_ context.Context, d *jetbus.Delivery) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, d.Event)
	return nil
}

func (c *collector) snapshot() []*jetbus.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*jetbus.Event(nil), c.events...)
}

func TestBusSchemaSharedAcrossProcesses(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	a := startProcess(t, s.ClientURL(), nil, false)
	b := startProcess(t, s.ClientURL(), nil, false)
	strict := startProcess(t, s.ClientURL(), []schema.Option{schema.WithStrict()}, false)
	require.NoError(t, a.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders.created", Partitions: 2}))

	// No schema yet: b publishes anything, the strict process nothing.
	_, err := b.bus.Publish(ctx, "orders.created", json.RawMessage(`{"free":true}`))
	require.NoError(t, err)
	_, err = strict.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"a","qty":1}`))
	require.ErrorIs(t, err, schema.ErrNoSchema)

	// a registers; b's and the strict process's Buses enforce it promptly.
	_, err = a.reg.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := b.bus.Publish(ctx, "orders.created", json.RawMessage(`{"free":true}`))
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	_, err = b.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"a","qty":0}`))
	var ve *schema.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "/qty", ve.Failures[0].Pointer)
	require.Eventually(t, func() bool {
		_, err := strict.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"s","qty":1}`))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	ev, err := b.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"b","qty":2}`), jetbus.WithKey("b"))
	require.NoError(t, err)
	assert.Equal(t, "1", ev.Header(jetbus.HeaderSchemaVersion))

	// What a subscriber sees carries the version on the wire.
	var got collector
	sub, err := a.bus.Subscribe(ctx, "orders.created", "readers", got.handle, jetbus.FromEarliest(),
		jetbus.Filter(func(e *jetbus.Event) bool { return e.Key == "b" }))
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { return len(got.snapshot()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "1", got.snapshot()[0].Header(jetbus.HeaderSchemaVersion))
	assert.JSONEq(t, `{"id":"b","qty":2}`, string(got.snapshot()[0].Payload))
}

func TestBusUpcastAndDualWrite(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	writer := startProcess(t, s.ClientURL(), nil, true)
	reader := startProcess(t, s.ClientURL(), nil, false)
	for _, topic := range []string{"heartbeat.received", "heartbeat.received.v1", "heartbeat.received.v2"} {
		require.NoError(t, writer.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic}))
	}
	require.NoError(t, writer.reg.SetMode(ctx, "heartbeat.received", schema.ModeNone, ""))
	_, err := writer.reg.Register(ctx, "heartbeat.received", []byte(hbV1))
	require.NoError(t, err)
	_, err = writer.bus.Publish(ctx, "heartbeat.received", json.RawMessage(`{"mem_mb":100}`), jetbus.WithID("old"))
	require.NoError(t, err)

	_, err = writer.reg.Register(ctx, "heartbeat.received", []byte(hbV2), schema.WithUpcast(opsV2...))
	require.NoError(t, err)
	_, err = writer.bus.Publish(ctx, "heartbeat.received", json.RawMessage(`{"mem_mib":200}`), jetbus.WithID("new"))
	require.NoError(t, err)
	_, err = writer.bus.Publish(ctx, "heartbeat.received", json.RawMessage(`{"mem_mb":300}`), jetbus.WithID("bad"))
	require.ErrorIs(t, err, schema.ErrInvalid, "publishes are validated against the latest version")

	// The reader's view has v2 with its upcaster; both events arrive as v2.
	require.Eventually(t, func() bool {
		v, err := reader.reg.Latest(ctx, "heartbeat.received")
		return err == nil && v.Version == 2
	}, 5*time.Second, 10*time.Millisecond)
	var got collector
	sub, err := reader.bus.Subscribe(ctx, "heartbeat.received", "readers", got.handle, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { return len(got.snapshot()) == 2 }, 10*time.Second, 10*time.Millisecond)
	byID := map[string]*jetbus.Event{}
	for _, e := range got.snapshot() {
		byID[e.ID] = e
		assert.Equal(t, "2", e.Header(jetbus.HeaderSchemaVersion))
	}
	require.Contains(t, byID, "old")
	assert.JSONEq(t, `{"mem_mib":100}`, string(byID["old"].Payload))
	assert.Equal(t, "1", byID["old"].Header(schema.HeaderUpcastedFrom))
	assert.JSONEq(t, `{"mem_mib":200}`, string(byID["new"].Payload))
	assert.Empty(t, byID["new"].Header(schema.HeaderUpcastedFrom))

	// Dual-write: each event also went to the versioned topic of its version.
	for topic, want := range map[string]string{"heartbeat.received.v1": "old", "heartbeat.received.v2": "new"} {
		var vgot collector
		vsub, err := reader.bus.Subscribe(ctx, topic, "readers", vgot.handle, jetbus.FromEarliest())
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(vgot.snapshot()) == 1 }, 10*time.Second, 10*time.Millisecond, topic)
		e := vgot.snapshot()[0]
		assert.Equal(t, want, e.ID, topic)
		assert.Equal(t, topic, e.Topic)
		require.NoError(t, vsub.Stop())
	}
}

func TestBusMissingHopIsNotRetried(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	nc := embeddedtest.Connect(t, s.ClientURL())
	reg := openRegistry(t, nc)
	bus, err := jbjs.Open(ctx, nc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bus.Close() })
	topic := "heartbeat.received"
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic}))
	require.NoError(t, reg.SetMode(ctx, topic, schema.ModeNone, ""))
	_, err = reg.Register(ctx, topic, []byte(hbV1))
	require.NoError(t, err)
	_, err = reg.Register(ctx, topic, []byte(hbV2)) // no upcaster from v1
	require.NoError(t, err)

	_, err = bus.Publish(ctx, topic, json.RawMessage(`{"mem_mb":1}`), jetbus.WithID("stuck"), jetbus.WithHeaders(map[string]string{"x-schema-version": "1"}))
	require.NoError(t, err)
	_, err = bus.Publish(ctx, topic, json.RawMessage(`{"mem_mib":2}`), jetbus.WithID("fine"), jetbus.WithHeaders(map[string]string{"x-schema-version": "2"}))
	require.NoError(t, err)

	type outcome struct {
		id      string
		attempt int
		err     error
	}
	var mu sync.Mutex
	var outcomes []outcome
	observe := func(next jetbus.Handler) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			err := next(ctx, d)
			mu.Lock()
			outcomes = append(outcomes, outcome{d.ID, d.Attempt, err})
			mu.Unlock()
			return err
		}
	}
	var got collector
	sub, err := bus.Subscribe(ctx, topic, "readers", got.handle, jetbus.FromEarliest(),
		jetbus.Backoff(func(int) time.Duration { return 10 * time.Millisecond }),
		jetbus.Use(observe, reg.UpcastMiddleware()))
	require.NoError(t, err)
	defer sub.Stop()

	// Both events settle: the good one acknowledged, the stuck one terminated at once.
	require.Eventually(t, func() bool {
		c, err := bus.Cursor(ctx, topic, "readers")
		return err == nil && c.Lag() == 0 && len(got.snapshot()) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "fine", got.snapshot()[0].ID)
	mu.Lock()
	defer mu.Unlock()
	var stuck []outcome
	for _, o := range outcomes {
		if o.id == "stuck" {
			stuck = append(stuck, o)
		}
	}
	require.Len(t, stuck, 1, "a missing hop is not retried")
	assert.Equal(t, 1, stuck[0].attempt)
	assert.ErrorIs(t, stuck[0].err, schema.ErrMissingUpcaster)
	assert.True(t, jetbus.IsPermanent(stuck[0].err))
}
