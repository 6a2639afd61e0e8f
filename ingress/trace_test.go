package ingress_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientTP      = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// From the wire, tracing off: a raw nats.go client's trace context reaches the stored event as
// it came (baggage for the allowed keys only); a malformed traceparent is dropped and counted,
// and the event stored all the same, answered or not.
func TestTraceContextFromTheWire(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	reg := prometheus.NewRegistry()
	pub, _ := e.publisher(jbjs.WithRegisterer(reg), jbjs.WithBaggageKeys("tenant"))
	e.runWith(pub, ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)

	r := decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":1}`),
		"traceparent", clientTP, "tracestate", "rojo=00f067aa0ba902b7", "baggage", "tenant=acme,secret=s3"))
	m := e.stored("orders")[0]
	assert.Equal(t, r.ID, m.Header.Get(jetbus.HeaderMsgID))
	assert.Equal(t, clientTP, m.Header.Get("traceparent"), "forwarded as it came: ingress does not trace")
	assert.Equal(t, "rojo=00f067aa0ba902b7", m.Header.Get("tracestate"))
	assert.Equal(t, "tenant=acme", m.Header.Get("baggage"), "only the allowed keys")

	// Malformed: dropped whole, with its tracestate, and counted; never a refusal.
	for i, tc := range [][]string{
		{"traceparent", "00-xyz", "tracestate", "rojo=1"},
		{"traceparent", "00-" + clientTraceID + "-" + clientSpanID + "-01\x01"},
		{"traceparent", clientTP, "traceparent", clientTP}, // given twice: not one traceparent
	} {
		decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":2}`), tc...))
		stored := e.stored("orders")
		m := stored[len(stored)-1]
		assert.Empty(t, m.Header.Get("traceparent"), "case %d", i)
		assert.Empty(t, m.Header.Get("tracestate"), "case %d", i)
		assert.Equal(t, float64(i+1), gathered(t, reg, "events_trace_headers_dropped_total", "topic", "orders", "header", "traceparent"), "case %d", i)
	}
	// Fire and forget: stored too.
	m0 := nats.NewMsg("in.orders")
	m0.Data = []byte(`{"n":3}`)
	m0.Header.Set("traceparent", "garbage")
	require.NoError(t, nc.PublishMsg(m0))
	require.Eventually(t, func() bool { return e.count("orders") == 5 }, wait, 10*time.Millisecond)
	assert.Equal(t, float64(4), gathered(t, reg, "events_trace_headers_dropped_total", "topic", "orders", "header", "traceparent"))
}

// recorder is an SDK tracer provider that keeps every ended span in memory, sampling all.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// ended waits for an ended span called name that match accepts.
func ended(t *testing.T, sr *tracetest.SpanRecorder, name string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range sr.Ended() {
			if s.Name() == name && (match == nil || match(s)) {
				found = s
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond, "a span %q", name)
	return found
}

func attrOf(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func inTrace(id string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().TraceID().String() == id }
}

// Tracing on: a request is a server span continuing the client's traceparent, the Bus's
// publish span its child, and the stored event carries the publish span's context in the
// client's trace; a refusal is recorded on the span; a refused fire-and-forget message's span
// ends once it is dead-lettered; a malformed traceparent starts a trace of ingress's own.
func TestIngressSpans(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 2})
	tp, sr := recorder(t)
	pub, _ := e.publisher(jbjs.WithTracerProvider(tp))
	q, err := dlq.Open(t.Context(), e.js, dlq.Config{}, dlq.WithTracerProvider(tp))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	e.q = q
	e.runWith(pub, ingress.Config{Allow: []string{"orders"}}, ingress.WithTracerProvider(tp))
	nc := client(t, e.url)

	r := decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":1}`), "traceparent", clientTP, "tracestate", "rojo=1", "x-key", "k"))
	in := ended(t, sr, "ingress orders", inTrace(clientTraceID))
	assert.Equal(t, trace.SpanKindServer, in.SpanKind())
	assert.Equal(t, clientSpanID, in.Parent().SpanID().String(), "a child of the client's span")
	assert.True(t, in.Parent().IsRemote())
	assert.Equal(t, "rojo=1", in.SpanContext().TraceState().String())
	assert.Equal(t, "in.orders", attrOf(in, "messaging.destination.name").AsString())
	assert.Equal(t, r.ID, attrOf(in, "messaging.message.id").AsString())
	assert.Equal(t, codes.Unset, in.Status().Code)
	pubSpan := ended(t, sr, "publish orders", inTrace(clientTraceID))
	assert.Equal(t, in.SpanContext().SpanID(), pubSpan.Parent().SpanID(), "the publish is the ingress span's child")
	m := e.stored("orders")[0]
	assert.Equal(t, "00-"+clientTraceID+"-"+pubSpan.SpanContext().SpanID().String()+"-01", m.Header.Get("traceparent"),
		"the stored event carries the publish span's context, in the client's trace")
	assert.Equal(t, "rojo=1", m.Header.Get("tracestate"))

	// A refused request: the code in error.type, the status an error.
	const refusedTrace = "11111111111111111111111111111111"
	decodeErr(t, request(t, nc, "in.orders", []byte(`{"n":2}`), "traceparent", "00-"+refusedTrace+"-"+clientSpanID+"-01", "x-dlq-reason", "forged"))
	ref := ended(t, sr, "ingress orders", inTrace(refusedTrace))
	assert.Equal(t, "reserved_header", attrOf(ref, "error.type").AsString())
	assert.Equal(t, codes.Error, ref.Status().Code)

	// A refused fire-and-forget message: its span ends once it is dead-lettered.
	const letterTrace = "22222222222222222222222222222222"
	fm := nats.NewMsg("in.orders")
	fm.Data = []byte(`not json`)
	fm.Header.Set("traceparent", "00-"+letterTrace+"-"+clientSpanID+"-01")
	require.NoError(t, nc.PublishMsg(fm))
	dl := ended(t, sr, "ingress orders", inTrace(letterTrace))
	assert.Equal(t, "not_json", attrOf(dl, "error.type").AsString())
	assert.Equal(t, 1, len(e.letters(dlq.Filter{Topic: "orders"})), "dead-lettered before the span ended")
	write := ended(t, sr, "dead-letter orders", inTrace(letterTrace))
	assert.Equal(t, dl.SpanContext().SpanID(), write.Parent().SpanID(), "the dead letter is written under the ingress span")

	// A subject that is no allowed topic: one span name for all of them.
	const otherTrace = "33333333333333333333333333333333"
	decodeErr(t, request(t, nc, "in.invented", []byte(`{}`), "traceparent", "00-"+otherTrace+"-"+clientSpanID+"-01"))
	other := ended(t, sr, "ingress _other", inTrace(otherTrace))
	assert.Equal(t, "in.invented", attrOf(other, "messaging.destination.name").AsString())
	assert.Equal(t, "not_allowed", attrOf(other, "error.type").AsString())

	// A malformed traceparent: a trace of ingress's own, which the event carries.
	decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":3}`), "traceparent", "00-nope", "x-key", "k"))
	stored := e.stored("orders")
	last := stored[len(stored)-1]
	id := jetbus.TraceIDOf(last.Header.Get("traceparent"))
	require.NotEmpty(t, id)
	root := ended(t, sr, "ingress orders", inTrace(id))
	assert.False(t, root.Parent().IsValid(), "a root span")
}
