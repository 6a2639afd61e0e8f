package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

const (
	wireTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	wireParent  = "00f067aa0ba902b7"
	wireTP      = "00-" + wireTraceID + "-" + wireParent + "-01"
)

// recorder is an SDK tracer provider that keeps every ended span in memory (the SDK's own
// test exporter), sampling everything.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// spansNamed returns the ended spans called name, waiting until there are n.
func spansNamed(t *testing.T, sr *tracetest.SpanRecorder, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	var out []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		out = out[:0]
		for _, s := range sr.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return len(out) >= n
	}, 10*time.Second, 5*time.Millisecond, "%d spans named %q", n, name)
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// delivered is what a handler saw: the delivery and the span context of its ctx.
type delivered struct {
	d   *jetbus.Delivery
	sc  trace.SpanContext
	bag baggage.Baggage
}

func collect(t *testing.T, b *jbjs.Bus, topic string, h func(d *jetbus.Delivery) error, opts ...jetbus.SubscribeOption) <-chan delivered {
	t.Helper()
	ch := make(chan delivered, 16)
	sub, err := b.Subscribe(t.Context(), topic, "g", func(ctx context.Context, d *jetbus.Delivery) error {
		ch <- delivered{d: d, sc: trace.SpanContextFromContext(ctx), bag: baggage.FromContext(ctx)}
		if h != nil {
			return h(d)
		}
		return nil
	}, append([]jetbus.SubscribeOption{jetbus.FromEarliest()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	return ch
}

func next(t *testing.T, ch <-chan delivered) delivered {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
		return delivered{}
	}
}

// lastHeaders returns the headers of the last message stored in topic's partition 0.
func lastHeaders(t *testing.T, b *jbjs.Bus, topic string) nats.Header {
	t.Helper()
	st, err := b.JetStream().Stream(t.Context(), jetbus.StreamName(topic))
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), jetbus.PartitionSubject(topic, 0))
	require.NoError(t, err)
	return m.Header
}

// From the wire: a raw nats.go publish to a partition's subject with a traceparent is
// delivered with it, and the handler's ctx carries a consumer span of that trace whose parent
// is the publisher's span.
func TestTraceParentFromTheWire(t *testing.T) {
	s := embeddedtest.NATS(t)
	tp, sr := recorder(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp))
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "wire"}))
	ch := collect(t, b, "wire", nil)

	// A plain nats.go client, nothing of jetbus: the subject and the W3C headers.
	nc := embeddedtest.Connect(t, s.ClientURL())
	m := nats.NewMsg("wire.p0")
	m.Data = []byte(`{"n":1}`)
	m.Header.Set("traceparent", wireTP)
	m.Header.Set("tracestate", "congo=t61rcWkgMzE")
	_, err := nc.RequestMsg(m, 5*time.Second) // the stream's publish acknowledgement
	require.NoError(t, err)

	got := next(t, ch)
	assert.Equal(t, wireTP, got.d.TraceParent)
	assert.Equal(t, "congo=t61rcWkgMzE", got.d.TraceState)
	assert.Equal(t, wireTraceID, got.d.TraceID())
	assert.Equal(t, wireTraceID, got.sc.TraceID().String(), "the handler's ctx is in the event's trace")
	assert.NotEqual(t, wireParent, got.sc.SpanID().String(), "the handler's ctx holds the delivery's own span")
	assert.Empty(t, got.d.Headers, "trace headers are not custom headers")

	span := spansNamed(t, sr, "process wire", 1)[0]
	assert.Equal(t, trace.SpanKindConsumer, span.SpanKind())
	assert.Equal(t, wireParent, span.Parent().SpanID().String())
	assert.True(t, span.Parent().IsRemote())
	assert.Equal(t, "congo=t61rcWkgMzE", span.SpanContext().TraceState().String())
	a := attrs(span)
	assert.Equal(t, "nats", a["messaging.system"].AsString())
	assert.Equal(t, "process", a["messaging.operation.type"].AsString())
	assert.Equal(t, "wire", a["messaging.destination.name"].AsString())
	assert.Equal(t, "g", a["messaging.consumer.group.name"].AsString())
	assert.Equal(t, "0", a["messaging.destination.partition.id"].AsString())
	assert.Equal(t, got.d.ID, a["messaging.message.id"].AsString())
	assert.Equal(t, int64(1), a["jetbus.attempt"].AsInt64())
	_, ok := a["jetbus.outcome"]
	assert.False(t, ok, "acknowledged at the first attempt: nothing more to say")
	assert.Len(t, a, 8, "the attributes a delivery's span costs")
}

// Publish continues ctx's span: the producer span is its child, the event carries the
// producer span's context, and the consumer span is the producer span's child. A failed
// delivery and its retry are two consumer spans of the same parent, with their attempts.
func TestPublishAndConsumeSpansLinkUp(t *testing.T) {
	s := embeddedtest.NATS(t)
	tp, sr := recorder(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp))
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "linked"}))
	ch := collect(t, b, "linked", func(d *jetbus.Delivery) error {
		if d.Attempt == 1 {
			return errFirst
		}
		return nil
	}, jetbus.Backoff(func(int) time.Duration { return 10 * time.Millisecond }))

	ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
	e, err := b.Publish(ctx, "linked", map[string]int{"n": 1})
	caller.End()
	require.NoError(t, err)
	callerSC := caller.SpanContext()
	assert.Equal(t, callerSC.TraceID().String(), e.TraceID(), "the event is in the caller's trace")

	h := lastHeaders(t, b, "linked")
	assert.Equal(t, e.TraceParent, h.Get("traceparent"), "stored under its W3C name")

	pub := spansNamed(t, sr, "publish linked", 1)[0]
	assert.Equal(t, trace.SpanKindProducer, pub.SpanKind())
	assert.Equal(t, callerSC.SpanID(), pub.Parent().SpanID())
	assert.Equal(t, pub.SpanContext().SpanID().String(), e.TraceParent[36:52], "the event carries the producer span")
	pa := attrs(pub)
	assert.Equal(t, "send", pa["messaging.operation.type"].AsString())
	assert.Equal(t, e.ID, pa["messaging.message.id"].AsString())
	assert.Equal(t, "0", pa["messaging.destination.partition.id"].AsString())
	assert.Len(t, pa, 6, "the attributes a publish's span costs")

	first, second := next(t, ch), next(t, ch)
	assert.Equal(t, 1, first.d.Attempt)
	assert.Equal(t, 2, second.d.Attempt)
	procs := spansNamed(t, sr, "process linked", 2)
	for i, p := range procs {
		assert.Equal(t, pub.SpanContext().SpanID(), p.Parent().SpanID(), "process span %d", i)
		assert.Equal(t, callerSC.TraceID(), p.SpanContext().TraceID())
		assert.Equal(t, int64(i+1), attrs(p)["jetbus.attempt"].AsInt64())
	}
	assert.Equal(t, "retry", attrs(procs[0])["jetbus.outcome"].AsString())
	assert.Equal(t, "Error", procs[0].Status().Code.String())
	assert.NotContains(t, attrs(procs[1]), attribute.Key("jetbus.outcome"))
	assert.Equal(t, "Unset", procs[1].Status().Code.String())
	assert.Equal(t, first.sc.SpanID(), procs[0].SpanContext().SpanID(), "the handler's ctx carries the delivery's span")
}

var errFirst = errors.New("first attempt fails")

// With KeyConcurrency a retry happens in place: one span, a retry event per failed attempt.
func TestInPlaceRetriesAreSpanEvents(t *testing.T) {
	s := embeddedtest.NATS(t)
	tp, sr := recorder(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp))
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "inplace"}))
	ch := collect(t, b, "inplace", func(d *jetbus.Delivery) error {
		if d.Attempt < 3 {
			return errFirst
		}
		return nil
	}, jetbus.KeyConcurrency(2), jetbus.Backoff(func(int) time.Duration { return time.Millisecond }))
	_, err := b.Publish(t.Context(), "inplace", 1, jetbus.WithKey("k"))
	require.NoError(t, err)
	for range 3 {
		next(t, ch)
	}
	span := spansNamed(t, sr, "process inplace", 1)[0]
	assert.Equal(t, int64(3), attrs(span)["jetbus.attempt"].AsInt64())
	assert.Equal(t, "ack", attrs(span)["jetbus.outcome"].AsString())
	require.Len(t, span.Events(), 2)
	for i, ev := range span.Events() {
		assert.Equal(t, "retry", ev.Name)
		assert.Contains(t, ev.Attributes, attribute.Int("jetbus.attempt", i+1))
	}
}

// Without a tracer the Bus starts no span, and the event still continues ctx's span, or
// else the trace context the caller passes.
func TestTraceContextWithoutTracing(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL()) // the global provider: a no-op
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "plain"}))
	ch := collect(t, b, "plain", nil)

	e, err := b.Publish(t.Context(), "plain", 1, jetbus.WithTraceContext(wireTP, "rojo=1"))
	require.NoError(t, err)
	assert.Equal(t, wireTP, e.TraceParent)
	assert.Equal(t, "rojo=1", e.TraceState)
	h := lastHeaders(t, b, "plain")
	assert.Equal(t, wireTP, h.Get("traceparent"))
	assert.Equal(t, "rojo=1", h.Get("tracestate"))
	got := next(t, ch)
	assert.Equal(t, wireTP, got.d.TraceParent)
	assert.False(t, got.sc.IsValid(), "without tracing the handler's ctx is the subscription's")

	// ctx's span wins over the options'.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)
	e, err = b.Publish(ctx, "plain", 2, jetbus.WithTraceContext(wireTP, "rojo=1"))
	require.NoError(t, err)
	assert.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", e.TraceParent)
	assert.Empty(t, e.TraceState)
	assert.Equal(t, e.TraceParent, next(t, ch).d.TraceParent)

	// PublishAsync does the same.
	f, err := b.PublishAsync(ctx, "plain", 3)
	require.NoError(t, err)
	e, err = f.Wait(t.Context())
	require.NoError(t, err)
	assert.Equal(t, sc.TraceID().String(), e.TraceID())
	assert.Equal(t, sc.TraceID().String(), next(t, ch).d.TraceID())
}

// A malformed traceparent is dropped (with its tracestate) and counted, at publish and at
// delivery; the event is stored and delivered all the same. A malformed tracestate alone is
// dropped too.
func TestMalformedTraceContextIsDroppedAndCounted(t *testing.T) {
	s := embeddedtest.NATS(t)
	reg := prometheus.NewRegistry()
	tp, _ := recorder(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithRegisterer(reg), jbjs.WithTracerProvider(tp))
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "bad"}))
	ch := collect(t, b, "bad", nil)
	dropped := func(header string) float64 {
		return labelled(t, reg, "events_trace_headers_dropped_total", map[string]string{"topic": "bad", "header": header})
	}

	e, err := b.Publish(t.Context(), "bad", 1, jetbus.WithTraceContext("00-garbage", "rojo=1"))
	require.NoError(t, err, "never an error for the event")
	assert.Equal(t, 1.0, dropped("traceparent"))
	assert.Equal(t, 0.0, dropped("tracestate"), "dropped with its traceparent, counted once")
	got := next(t, ch)
	assert.Equal(t, e.ID, got.d.ID)
	assert.NotEqual(t, "00-garbage", got.d.TraceParent, "a root span of the Bus's own instead")
	assert.True(t, jetbus.ValidTraceParent(got.d.TraceParent))

	e, err = b.Publish(t.Context(), "bad", 2, jetbus.WithTraceContext(wireTP, "Bad Key=1"))
	require.NoError(t, err)
	assert.Equal(t, wireTraceID, e.TraceID())
	assert.Empty(t, e.TraceState)
	assert.Equal(t, 1.0, dropped("tracestate"))
	next(t, ch)

	// From the wire, straight into the stream.
	for _, h := range []map[string]string{
		{"traceparent": "00-" + wireTraceID + "-" + wireParent + "-1"},
		{"traceparent": wireTP, "tracestate": "a=b,a=c"},
	} {
		m := nats.NewMsg("bad.p0")
		m.Data = []byte(`{}`)
		for k, v := range h {
			m.Header.Set(k, v)
		}
		_, err = b.JetStream().PublishMsg(t.Context(), m)
		require.NoError(t, err)
	}
	got = next(t, ch)
	assert.Empty(t, got.d.TraceParent)
	assert.NotEqual(t, wireTraceID, got.sc.TraceID().String())
	got = next(t, ch)
	assert.Equal(t, wireTP, got.d.TraceParent)
	assert.Empty(t, got.d.TraceState)
	assert.Equal(t, 2.0, dropped("traceparent"))
	assert.Equal(t, 2.0, dropped("tracestate"))
	assert.Equal(t, 0.0, dropped("baggage"))
}

// No other non-x- header becomes legal: the trace context goes through its own options.
func TestTraceHeadersAreNotCustomHeaders(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "hdr"}))
	for _, name := range []string{"traceparent", "tracestate", "baggage", "x-traceparent-ok"} {
		_, err := b.Publish(t.Context(), "hdr", 1, jetbus.WithHeaders(map[string]string{name: wireTP}))
		if name == "x-traceparent-ok" {
			assert.NoError(t, err)
			continue
		}
		assert.ErrorIs(t, err, jetbus.ErrInvalidHeader, name)
	}
	_, err := jbjs.Open(t.Context(), b.Conn(), jbjs.WithBaggageKeys("a b"))
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
}

// Baggage is opt-in, key by key: a Bus without WithBaggageKeys writes and reads none; one
// with it keeps only those keys, from ctx or from WithBaggage, and puts them in the
// handler's ctx.
func TestBaggageIsOptIn(t *testing.T) {
	s := embeddedtest.NATS(t)
	reg := prometheus.NewRegistry()
	tp, _ := recorder(t)
	plain := embeddedtest.Bus(t, s.ClientURL())
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp), jbjs.WithBaggageKeys("tenant", "region"), jbjs.WithRegisterer(reg))
	for _, topic := range []string{"bagoff", "bagon"} {
		require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: topic}))
	}
	tenant, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	secret, err := baggage.NewMember("secret", "s3cr3t")
	require.NoError(t, err)
	bag, err := baggage.New(tenant, secret)
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(t.Context(), bag)

	// Off by default.
	offCh := collect(t, plain, "bagoff", nil)
	e, err := plain.Publish(ctx, "bagoff", 1, jetbus.WithBaggage("tenant=x"))
	require.NoError(t, err)
	assert.Empty(t, e.Baggage)
	assert.Empty(t, lastHeaders(t, plain, "bagoff").Get("baggage"))
	m := nats.NewMsg("bagoff.p0")
	m.Data = []byte(`1`)
	m.Header.Set("baggage", "tenant=acme")
	_, err = plain.JetStream().PublishMsg(t.Context(), m)
	require.NoError(t, err)
	next(t, offCh)
	assert.Empty(t, next(t, offCh).d.Baggage)

	// Allowed keys only.
	onCh := collect(t, b, "bagon", nil)
	e, err = b.Publish(ctx, "bagon", 1)
	require.NoError(t, err)
	assert.Equal(t, "tenant=acme", e.Baggage)
	assert.Equal(t, "tenant=acme", lastHeaders(t, b, "bagon").Get("baggage"))
	got := next(t, onCh)
	assert.Equal(t, "tenant=acme", got.d.Baggage)
	assert.Equal(t, "acme", got.bag.Member("tenant").Value())
	assert.Empty(t, got.bag.Member("secret").Value())

	_, err = b.Publish(t.Context(), "bagon", 2, jetbus.WithBaggage("region=eu, secret=1"))
	require.NoError(t, err)
	assert.Equal(t, "region=eu", next(t, onCh).d.Baggage)
	_, err = b.Publish(t.Context(), "bagon", 3, jetbus.WithBaggage("region"))
	require.NoError(t, err, "a malformed baggage is dropped, not an error")
	assert.Empty(t, next(t, onCh).d.Baggage)
	assert.Equal(t, 1.0, labelled(t, reg, "events_trace_headers_dropped_total", map[string]string{"topic": "bagon", "header": "baggage"}))
}

// An async publish's producer span ends when Wait learns the result, with the event's
// partition.
func TestPublishAsyncSpan(t *testing.T) {
	s := embeddedtest.NATS(t)
	tp, sr := recorder(t)
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp))
	require.NoError(t, b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "async", Partitions: 3}))
	f, err := b.PublishAsync(t.Context(), "async", 1, jetbus.WithKey("k"))
	require.NoError(t, err)
	assert.Empty(t, sr.Ended())
	e, err := f.Wait(t.Context())
	require.NoError(t, err)
	span := spansNamed(t, sr, "publish async", 1)[0]
	assert.Equal(t, span.SpanContext().TraceID().String(), e.TraceID())
	assert.Equal(t, jetbus.PartitionOf("k", 3), int(mustInt(t, attrs(span)["messaging.destination.partition.id"].AsString())))

	// A Bus that has not seen the topic yet learns the partition during the publish.
	fresh := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithTracerProvider(tp))
	_, err = fresh.Publish(t.Context(), "async", 2, jetbus.WithKey("other"))
	require.NoError(t, err)
	span = spansNamed(t, sr, "publish async", 2)[1]
	assert.Equal(t, jetbus.PartitionOf("other", 3), int(mustInt(t, attrs(span)["messaging.destination.partition.id"].AsString())))
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', s)
		n = n*10 + int64(c-'0')
	}
	return n
}

// labelled returns the value of the counter name with exactly these labels (0 when absent).
func labelled(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
