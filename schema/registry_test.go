package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openRegistry(t *testing.T, nc *nats.Conn, opts ...schema.Option) *schema.Registry {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	r, err := schema.Open(ctxT(t), js, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newRegistry(t *testing.T, opts ...schema.Option) (*schema.Registry, *nats.Conn) {
	t.Helper()
	s := embeddedtest.NATS(t)
	nc := embeddedtest.Connect(t, s.ClientURL())
	return openRegistry(t, nc, opts...), nc
}

const (
	orderV1 = `{"type":"object","properties":{"id":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["id","qty"],"additionalProperties":false}`
	orderV2 = `{"type":"object","properties":{"id":{"type":"string"},"qty":{"type":"integer","minimum":1},"note":{"type":"string"}},"required":["id","qty"],"additionalProperties":false}`
	// orderV2Reordered is orderV2 with other key order and spacing.
	orderV2Reordered = `{ "additionalProperties": false, "required": ["id","qty"], "type": "object",
		"properties": {"note": {"type": "string"}, "qty": {"minimum": 1, "type": "integer"}, "id": {"type": "string"}}}`
	// orderBad narrows qty to a string: incompatible with v1 and v2.
	orderBad = `{"type":"object","properties":{"id":{"type":"string"},"qty":{"type":"string"}},"required":["id","qty"],"additionalProperties":false}`
)

func TestRegistryRegisterGetLatestList(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)

	_, err := r.Latest(ctx, "orders.created")
	require.ErrorIs(t, err, schema.ErrNoSchema)

	v1, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	assert.Equal(t, 1, v1.Version)
	assert.Equal(t, schema.ModeBackward, v1.Mode)
	assert.NotEmpty(t, v1.Fingerprint)

	v2, err := r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)
	assert.Equal(t, 2, v2.Version)

	got, err := r.Get(ctx, "orders.created", 1)
	require.NoError(t, err)
	assert.JSONEq(t, orderV1, string(got.Schema))
	latest, err := r.Latest(ctx, "orders.created")
	require.NoError(t, err)
	assert.Equal(t, 2, latest.Version)
	list, err := r.List(ctx, "orders.created")
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, []int{1, 2}, []int{list[0].Version, list[1].Version})
	topics, err := r.Topics(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"orders.created"}, topics)

	_, err = r.Get(ctx, "orders.created", 9)
	require.ErrorIs(t, err, schema.ErrVersionNotFound)
}

func TestRegistryIdempotent(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	_, err = r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)

	again, err := r.Register(ctx, "orders.created", []byte(orderV2Reordered))
	require.NoError(t, err)
	assert.Equal(t, 2, again.Version, "an identical schema returns the existing version")
	first, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	assert.Equal(t, 1, first.Version, "an identical older schema returns its version, as in Confluent")
	list, err := r.List(ctx, "orders.created")
	require.NoError(t, err)
	assert.Len(t, list, 2)

	_, err = r.Register(ctx, "orders.created", []byte(orderV1), schema.ExpectVersion(2))
	require.ErrorIs(t, err, schema.ErrVersionConflict)
}

func TestRegistryRefusesIncompatible(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)

	require.NoError(t, r.Check(ctx, "orders.created", []byte(orderV2)), "dry run of a compatible schema")
	err = r.Check(ctx, "orders.created", []byte(orderBad))
	require.ErrorIs(t, err, schema.ErrIncompatible)

	_, err = r.Register(ctx, "orders.created", []byte(orderBad))
	var ie *schema.IncompatibleError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "orders.created", ie.Topic)
	require.NotEmpty(t, ie.Reasons)
	assert.Equal(t, "/properties/qty/type", ie.Reasons[0].Pointer)
	assert.Equal(t, "TYPE_CHANGED", ie.Reasons[0].Rule)
	assert.Equal(t, 1, ie.Reasons[0].Version)
	list, _ := r.List(ctx, "orders.created")
	assert.Len(t, list, 1, "dry runs and refused registrations create nothing")

	// Under NONE the same schema registers; the version records its mode.
	v, err := r.Register(ctx, "orders.created", []byte(orderBad), schema.WithMode("none"))
	require.NoError(t, err)
	assert.Equal(t, schema.ModeNone, v.Mode)
}

func TestRegistryTopicMode(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)

	// orderV2 adds an optional property to a closed model: BACKWARD only.
	require.NoError(t, r.SetMode(ctx, "orders.created", schema.ModeFull, ""))
	m, p, err := r.Mode(ctx, "orders.created")
	require.NoError(t, err)
	assert.Equal(t, schema.ModeFull, m)
	assert.Equal(t, schema.PolicyStrict, p)
	require.ErrorIs(t, r.Check(ctx, "orders.created", []byte(orderV2)), schema.ErrIncompatible)

	require.NoError(t, r.SetMode(ctx, "orders.created", schema.ModeFull, schema.PolicyLenient))
	v, err := r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err, "LENIENT allows adding an optional property under FULL")
	assert.Equal(t, schema.ModeFull, v.Mode)

	require.ErrorIs(t, r.SetMode(ctx, "orders.created", "sideways", ""), schema.ErrUnknownMode)
	require.ErrorIs(t, r.SetMode(ctx, "orders.created", schema.ModeFull, "loose"), schema.ErrUnknownMode)
	require.ErrorIs(t, r.SetMode(ctx, "Orders", schema.ModeFull, ""), jetbus.ErrInvalidTopic)
}

func TestRegistryBadInput(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	for _, topic := range []string{"", "Orders", "orders..created", "dlq.orders", "orders.p3", "in.x"} {
		_, err := r.Register(ctx, topic, []byte(orderV1))
		require.ErrorIs(t, err, jetbus.ErrInvalidTopic, "%q", topic)
	}
	for _, doc := range []string{``, `{`, `[]`, `"x"`, `{"type":7}`, `{"properties":{"a":{"minLength":-1}}}`} {
		_, err := r.Register(ctx, "orders.created", []byte(doc))
		require.ErrorIs(t, err, schema.ErrInvalidSchema, "%q", doc)
	}
	_, err := r.Register(ctx, "orders.created", []byte(orderV1), schema.WithMode("sideways"))
	require.ErrorIs(t, err, schema.ErrUnknownMode)
	_, err = r.Register(ctx, "orders.created", []byte(orderV1), schema.WithUpcast(schema.Op{Op: "rename", From: "/a", Path: "/b"}))
	require.ErrorIs(t, err, schema.ErrInvalidUpcaster, "version 1 has nothing to upcast from")
	_, err = r.Register(ctx, "orders.created", []byte(orderV1), schema.WithUpcast(schema.Op{Op: "explode", Path: "/a"}))
	require.ErrorIs(t, err, schema.ErrInvalidUpcaster)
	_, err = r.Register(ctx, "orders.created", []byte(orderV1), schema.ExpectVersion(0))
	require.ErrorIs(t, err, jetbus.ErrInvalidOption)

	js, err := natsjs.New(embeddedtest.Connect(t, embeddedtest.NATS(t).ClientURL()))
	require.NoError(t, err)
	for _, opt := range []schema.Option{schema.WithBucket(""), schema.WithReplicas(0), schema.WithResyncInterval(time.Millisecond)} {
		_, err := schema.Open(ctx, js, opt)
		require.ErrorIs(t, err, jetbus.ErrInvalidOption)
	}
	for _, opt := range []schema.Option{schema.WithDefaultMode("up"), schema.WithPolicy("loose")} {
		_, err := schema.Open(ctx, js, opt)
		require.ErrorIs(t, err, schema.ErrUnknownMode)
	}
}

func TestRegistryConcurrentRegistrations(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	const n = 8
	regs := make([]*schema.Registry, n)
	for i := range regs {
		regs[i] = openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))
	}
	require.NoError(t, regs[0].SetMode(ctx, "orders.created", schema.ModeNone, ""))
	var wg sync.WaitGroup
	versions := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc := fmt.Sprintf(`{"type":"object","properties":{"f%d":{"type":"string"}}}`, i)
			v, err := regs[i].Register(ctx, "orders.created", []byte(doc))
			errs[i] = err
			if err == nil {
				versions[i] = v.Version
			}
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		assert.False(t, seen[versions[i]], "version %d taken twice", versions[i])
		seen[versions[i]] = true
	}
	for v := 1; v <= n; v++ {
		assert.True(t, seen[v], "version %d missing", v)
	}
}

func TestRegistryConcurrentIncompatible(t *testing.T) {
	// Two processes race to register schemas that are each compatible with v1 but not with
	// each other: the loser of the KV create checks again against the winner and is refused.
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	a := openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))
	b := openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))
	base := `{"type":"object","properties":{"x":{"enum":[1,2,3]}}}`
	_, err := a.Register(ctx, "t", []byte(base))
	require.NoError(t, err)
	one := `{"type":"object","properties":{"x":{"enum":[1,2,3,4]}}}`
	two := `{"type":"object","properties":{"x":{"enum":[1,2,3,5]}}}`
	for range 5 {
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, e1 = a.Register(ctx, "t", []byte(one), schema.WithMode(schema.ModeBackwardTransitive))
		}()
		go func() {
			defer wg.Done()
			_, e2 = b.Register(ctx, "t", []byte(two), schema.WithMode(schema.ModeBackwardTransitive))
		}()
		wg.Wait()
		require.True(t, (e1 == nil) != (e2 == nil), "exactly one wins: %v / %v", e1, e2)
		loser := e1
		if loser == nil {
			loser = e2
		}
		require.ErrorIs(t, loser, schema.ErrIncompatible)
		// Reset for the next round. a learns of b's version through its watch: ask until it
		// lists it.
		var list []*schema.Version
		require.Eventually(t, func() bool {
			list, err = a.List(ctx, "t")
			return err == nil && len(list) == 2
		}, 10*time.Second, 5*time.Millisecond, "a lists both versions: %v", list)
		require.NoError(t, a.Delete(ctx, "t", list[1].Version))
	}
}

func TestRegistrySoftDelete(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	_, err = r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)

	require.NoError(t, r.Delete(ctx, "orders.created", 2))
	require.NoError(t, r.Delete(ctx, "orders.created", 2), "deleting twice is a no-op")
	require.ErrorIs(t, r.Delete(ctx, "orders.created", 7), schema.ErrVersionNotFound)

	latest, err := r.Latest(ctx, "orders.created")
	require.NoError(t, err)
	assert.Equal(t, 1, latest.Version)
	got, err := r.Get(ctx, "orders.created", 2)
	require.NoError(t, err)
	assert.True(t, got.Deleted)
	list, err := r.List(ctx, "orders.created")
	require.NoError(t, err)
	assert.Len(t, list, 1)

	// Re-registering the deleted schema makes a new version: numbers are never reused.
	v, err := r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)
	assert.Equal(t, 3, v.Version)

	// Deleting every version leaves the topic without a schema.
	require.NoError(t, r.Delete(ctx, "orders.created", 1))
	require.NoError(t, r.Delete(ctx, "orders.created", 3))
	_, err = r.Latest(ctx, "orders.created")
	require.ErrorIs(t, err, schema.ErrNoSchema)
}

func TestRegistryValidate(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	require.NoError(t, r.Validate(ctx, "orders.created", 0, []byte(`{"id":"a","qty":2}`)))

	err = r.Validate(ctx, "orders.created", 0, []byte(`{"id":5,"qty":0,"extra":true}`))
	require.ErrorIs(t, err, schema.ErrInvalid)
	var ve *schema.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, 1, ve.Version)
	var ptrs []string
	for _, f := range ve.Failures {
		ptrs = append(ptrs, f.Pointer)
	}
	assert.Subset(t, ptrs, []string{"/id", "/qty"})
	assert.Contains(t, err.Error(), "/qty")

	require.ErrorIs(t, r.Validate(ctx, "orders.created", 0, []byte(`{nope`)), schema.ErrInvalid)
	require.ErrorIs(t, r.Validate(ctx, "orders.created", 4, []byte(`{}`)), schema.ErrVersionNotFound)
	require.ErrorIs(t, r.Validate(ctx, "other", 0, []byte(`{}`)), schema.ErrNoSchema)
}

func TestRegistrySharedAcrossProcesses(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := ctxT(t)
	a := openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))
	b := openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))

	_, err := a.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := b.Latest(ctx, "orders.created")
		return err == nil && v.Version == 1
	}, 5*time.Second, 5*time.Millisecond, "a version registered by one process reaches the other's view")

	// b's publish path enforces it.
	var published []*jetbus.Event
	pub := jetbus.ChainPublish(func(_ context.Context, e *jetbus.Event) error {
		published = append(published, e)
		return nil
	}, b.PublishMiddleware())
	err = pub(ctx, &jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a"}`)})
	require.ErrorIs(t, err, schema.ErrInvalid)
	require.NoError(t, pub(ctx, &jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`)}))
	require.Len(t, published, 1)
	assert.Equal(t, "1", published[0].Header(jetbus.HeaderSchemaVersion))

	// A deletion travels too.
	_, err = a.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)
	require.NoError(t, a.Delete(ctx, "orders.created", 2))
	require.Eventually(t, func() bool {
		v, err := b.Get(ctx, "orders.created", 2)
		return err == nil && v.Deleted
	}, 5*time.Second, 5*time.Millisecond)
}

func TestRegistrySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := embeddedtest.ServerOptions(dir)
	s, err := embeddedtest.StartServer(opts)
	require.NoError(t, err)
	ctx := ctxT(t)

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	r, err := schema.Open(ctx, js)
	require.NoError(t, err)
	_, err = r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	require.NoError(t, r.SetMode(ctx, "orders.created", schema.ModeFull, ""))
	require.NoError(t, r.Close())
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	// A new server on the same store directory.
	opts2 := embeddedtest.ServerOptions(dir)
	s2, err := embeddedtest.StartServer(opts2)
	require.NoError(t, err)
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })

	r2 := openRegistry(t, embeddedtest.Connect(t, s2.ClientURL()))
	v, err := r2.Latest(ctx, "orders.created")
	require.NoError(t, err)
	assert.Equal(t, 1, v.Version)
	assert.JSONEq(t, orderV1, string(v.Schema))
	m, _, err := r2.Mode(ctx, "orders.created")
	require.NoError(t, err)
	assert.Equal(t, schema.ModeFull, m, "the topic's mode survives too")
	// FULL refuses orderV2 (closed model, new optional property): the mode is enforced.
	_, err = r2.Register(ctx, "orders.created", []byte(orderV2))
	require.ErrorIs(t, err, schema.ErrIncompatible)
	v2, err := r2.Register(ctx, "orders.created", []byte(orderV2), schema.WithMode(schema.ModeBackward))
	require.NoError(t, err)
	assert.Equal(t, 2, v2.Version)

	// A Bus of a process started after the restart enforces the schemas.
	p := startProcess(t, s2.ClientURL(), nil, false)
	require.NoError(t, p.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders.created"}))
	_, err = p.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"a"}`))
	require.ErrorIs(t, err, schema.ErrInvalid)
	ev, err := p.bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"a","qty":1,"note":"n"}`))
	require.NoError(t, err)
	assert.Equal(t, "2", ev.Header(jetbus.HeaderSchemaVersion))
}

func TestRegistryClosed(t *testing.T) {
	r, _ := newRegistry(t)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close is idempotent")
	_, err := r.Register(ctxT(t), "orders.created", []byte(orderV1))
	require.ErrorIs(t, err, jetbus.ErrClosed)
	pub := jetbus.ChainPublish(func(context.Context, *jetbus.Event) error { return nil }, r.PublishMiddleware())
	require.True(t, errors.Is(pub(ctxT(t), &jetbus.Event{Topic: "x"}), jetbus.ErrClosed))
}

func natsjsNew(nc *nats.Conn) (natsjs.JetStream, error) { return natsjs.New(nc) }
