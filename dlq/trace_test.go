package dlq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

const (
	wireTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	wireSpanID  = "00f067aa0ba902b7"
	wireTP      = "00-" + wireTraceID + "-" + wireSpanID + "-01"
)

// tracedEnv is a Queue and a Bus (with the Queue's middleware) tracing with tp, or not at all
// when tp is nil.
func tracedEnv(t *testing.T, tp trace.TracerProvider) (*server.Server, *jbjs.Bus, *dlq.Queue) {
	t.Helper()
	s := embeddedtest.NATS(t)
	nc := embeddedtest.Connect(t, s.ClientURL())
	bare, err := jbjs.Open(t.Context(), nc)
	require.NoError(t, err)
	var qopts []dlq.Option
	bopts := []jbjs.Option{jbjs.WithLogger(embeddedtest.Logger(t)), jbjs.WithBaggageKeys("tenant")}
	if tp != nil {
		qopts = append(qopts, dlq.WithTracerProvider(tp))
		bopts = append(bopts, jbjs.WithTracerProvider(tp))
	}
	q, err := dlq.Open(t.Context(), bare.JetStream(), dlq.Config{}, append(qopts, dlq.WithLogger(embeddedtest.Logger(t)))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	bus, err := jbjs.Open(t.Context(), nc, append(bopts, jbjs.WithHandlerMiddleware(q.Middleware()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bus.Close() })
	require.NoError(t, bus.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "orders"}))
	return s, bus, q
}

// poison publishes, as a raw nats.go client would, an event with the wire trace context and a
// baggage to orders, which group billing refuses for good until fixed is set; it returns once
// the event is dead-lettered.
func poison(t *testing.T, s *server.Server, bus *jbjs.Bus, q *dlq.Queue, fixed *atomic.Bool) *dlq.Letter {
	t.Helper()
	sub, err := bus.Subscribe(t.Context(), "orders", "billing", func(_ context.Context, d *jetbus.Delivery) error {
		if fixed.Load() {
			return nil
		}
		return jetbus.Permanent(errors.New("refused"))
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	nc := embeddedtest.Connect(t, s.ClientURL())
	m := nats.NewMsg("orders.p0")
	m.Data = []byte(`{"n":1}`)
	m.Header.Set("Nats-Msg-Id", "evt-1")
	m.Header.Set("traceparent", wireTP)
	m.Header.Set("tracestate", "rojo=1")
	m.Header.Set("baggage", "tenant=acme")
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.PublishMsg(m)
	require.NoError(t, err)
	var ls []*dlq.Letter
	require.Eventually(t, func() bool {
		ls, err = q.List(t.Context(), dlq.Filter{Topic: "orders"}, 0)
		return err == nil && len(ls) == 1
	}, wait, 10*time.Millisecond)
	return ls[0]
}

func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

func endedSpan(t *testing.T, sr *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range sr.Ended() {
			if s.Name() == name {
				found = s
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond, "a span %q", name)
	return found
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// storedHeader returns the headers of the last event stored in orders.
func storedHeader(t *testing.T, bus *jbjs.Bus) nats.Header {
	t.Helper()
	st, err := bus.JetStream().Stream(t.Context(), jetbus.StreamName("orders"))
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "orders.p0")
	require.NoError(t, err)
	return m.Header
}

// From the wire, traced: the dead letter of a raw client's event is written under a span in
// the failing delivery's trace and keeps the event's trace context; its replay is a span of
// that trace, linked to the original span and to the replay's own span, and the replayed
// event continues the original trace, under the replay span.
func TestDeadLetterAndReplaySpans(t *testing.T) {
	tp, sr := spanRecorder(t)
	s, bus, q := tracedEnv(t, tp)
	var fixed atomic.Bool
	l := poison(t, s, bus, q, &fixed)
	assert.Equal(t, wireTP, l.Header.Get("traceparent"), "the dead letter keeps the event's trace context")
	assert.Equal(t, "rojo=1", l.Header.Get("tracestate"))
	assert.Equal(t, "tenant=acme", l.Header.Get("baggage"))

	process := endedSpan(t, sr, "process orders")
	write := endedSpan(t, sr, "dead-letter orders")
	assert.Equal(t, trace.SpanKindProducer, write.SpanKind())
	assert.Equal(t, wireTraceID, write.SpanContext().TraceID().String(), "in the failing delivery's trace")
	assert.Equal(t, process.SpanContext().SpanID(), write.Parent().SpanID(), "a child of the delivery's span")
	assert.Equal(t, dlq.ReasonPermanent, spanAttr(write, "jetbus.dlq.reason").AsString())
	assert.Equal(t, "dlq.orders", spanAttr(write, "messaging.destination.name").AsString())
	assert.Equal(t, "1", spanAttr(write, "jetbus.dlq.seq").AsString())

	fixed.Store(true)
	rep, err := q.Replay(t.Context(), bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	run := endedSpan(t, sr, "dlq replay")
	assert.False(t, run.Parent().IsValid(), "a replay without a caller's span is a trace of its own")
	assert.Equal(t, int64(1), spanAttr(run, "jetbus.dlq.replayed").AsInt64())
	replay := endedSpan(t, sr, "replay orders")
	assert.Equal(t, wireTraceID, replay.SpanContext().TraceID().String(), "the replay continues the original trace")
	assert.Equal(t, wireSpanID, replay.Parent().SpanID().String())
	links := map[string]string{}
	for _, lk := range replay.Links() {
		for _, kv := range lk.Attributes {
			if kv.Key == "jetbus.link" {
				links[kv.Value.AsString()] = lk.SpanContext.TraceID().String() + "-" + lk.SpanContext.SpanID().String()
			}
		}
	}
	assert.Equal(t, wireTraceID+"-"+wireSpanID, links["original"], "linked to the original span")
	assert.Equal(t, run.SpanContext().TraceID().String()+"-"+run.SpanContext().SpanID().String(), links["replay"], "linked to the replay's span")

	var publish sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, sp := range sr.Ended() {
			if sp.Name() == "publish orders" && sp.Parent().SpanID() == replay.SpanContext().SpanID() {
				publish = sp
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond, "the replayed event's publish span, the replay span's child")
	h := storedHeader(t, bus)
	assert.Equal(t, dlq.ReplayID(l), h.Get(jetbus.HeaderMsgID))
	assert.Equal(t, "00-"+wireTraceID+"-"+publish.SpanContext().SpanID().String()+"-01", h.Get("traceparent"),
		"the replayed event carries the original trace ID")
	assert.Equal(t, "rojo=1", h.Get("tracestate"))
	assert.Equal(t, "tenant=acme", h.Get("baggage"))
}

// Tracing off: the replayed event carries the dead letter's trace context as it was.
func TestReplayKeepsTraceContextUntraced(t *testing.T) {
	s, bus, q := tracedEnv(t, nil)
	var fixed atomic.Bool
	l := poison(t, s, bus, q, &fixed)
	fixed.Store(true)
	rep, err := q.Replay(t.Context(), bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	h := storedHeader(t, bus)
	assert.Equal(t, dlq.ReplayID(l), h.Get(jetbus.HeaderMsgID))
	assert.Equal(t, wireTP, h.Get("traceparent"))
	assert.Equal(t, "rojo=1", h.Get("tracestate"))
	assert.Equal(t, "tenant=acme", h.Get("baggage"))
}

// A dead letter written without a span in ctx (the safety net's, a changefeed's refusal)
// continues the trace context of the message it keeps.
func TestDeadLetterSpanFollowsTheMessage(t *testing.T) {
	tp, sr := spanRecorder(t)
	_, _, q := tracedEnv(t, tp)
	_, err := q.Reject(t.Context(), dlq.Rejected{Topic: "orders", Source: "changefeed.c", By: "changefeed-c", Reason: dlq.ReasonChangefeed,
		Header: nats.Header{"traceparent": {wireTP}}, Data: []byte(`{}`), Err: errors.New("refused")})
	require.NoError(t, err)
	write := endedSpan(t, sr, "dead-letter orders")
	assert.Equal(t, wireTraceID, write.SpanContext().TraceID().String())
	assert.Equal(t, wireSpanID, write.Parent().SpanID().String())
	assert.Equal(t, dlq.ReasonChangefeed, spanAttr(write, "jetbus.dlq.reason").AsString())
}

// The safety net, traced: a raw client's event whose handler hangs past its attempts is
// dead-lettered by the sweeper (no handler span to follow): the letter keeps the event's
// trace context, its write is a span of the event's trace (a child of the client's span),
// and its replay continues that trace, linked to the original.
func TestSweptLetterKeepsTheTrace(t *testing.T) {
	tp, sr := spanRecorder(t)
	s, bus, q := tracedEnv(t, tp)
	ctx, cancel := context.WithCancel(t.Context())
	swept := make(chan error, 1)
	go func() { swept <- q.RunSweeper(ctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-swept }()
	release := make(chan struct{})
	var once atomic.Bool
	sub, err := bus.Subscribe(ctx, "orders", "billing", func(context.Context, *jetbus.Delivery) error {
		if !once.Load() {
			<-release
		}
		return nil
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(2), jetbus.AckTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer func() { once.Store(true); close(release); _ = sub.Stop() }()

	nc := embeddedtest.Connect(t, s.ClientURL())
	m := nats.NewMsg("orders.p0")
	m.Data = []byte(`{"n":1}`)
	m.Header.Set("Nats-Msg-Id", "evt-hung")
	m.Header.Set("traceparent", wireTP)
	m.Header.Set("tracestate", "rojo=1")
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.PublishMsg(m)
	require.NoError(t, err)

	var ls []*dlq.Letter
	require.Eventually(t, func() bool {
		ls, err = q.List(t.Context(), dlq.Filter{Topic: "orders", Reason: dlq.ReasonMaxDeliveries}, 0)
		return err == nil && len(ls) == 1
	}, wait, 10*time.Millisecond, "the sweeper dead-letters the hung event")
	l := ls[0]
	assert.Equal(t, wireTP, l.Header.Get("traceparent"), "the swept letter keeps the event's trace context")
	assert.Equal(t, "rojo=1", l.Header.Get("tracestate"))

	write := endedSpan(t, sr, "dead-letter orders")
	assert.Equal(t, dlq.ReasonMaxDeliveries, spanAttr(write, "jetbus.dlq.reason").AsString())
	assert.Equal(t, wireTraceID, write.SpanContext().TraceID().String(), "in the event's trace")
	assert.Equal(t, wireSpanID, write.Parent().SpanID().String(), "a child of the client's span")

	once.Store(true)
	rep, err := q.Replay(t.Context(), bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	replay := endedSpan(t, sr, "replay orders")
	assert.Equal(t, wireTraceID, replay.SpanContext().TraceID().String(), "the replay continues the original trace")
	var original bool
	for _, lk := range replay.Links() {
		original = original || lk.SpanContext.SpanID().String() == wireSpanID
	}
	assert.True(t, original, "the replay links to the original span")
	assert.Equal(t, wireTraceID, storedHeader(t, bus).Get("traceparent")[3:35], "the replayed event carries the original trace ID")
}
