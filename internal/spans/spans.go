// Package spans holds what jetbus's libraries share to trace with OpenTelemetry: whether a
// tracer provider traces at all (so that a Bus without one does no tracing work), an
// event's trace context as a span's parent and back, and the messaging attributes of the
// OpenTelemetry semantic conventions. It uses the OpenTelemetry API only: the SDK and its
// exporters belong to the processes (internal/tracing).
package spans

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
)

// System is the messaging.system of every jetbus span.
const System = "nats"

// Attribute keys of jetbus's own, beside the semantic conventions'.
const (
	// AttrAttempt is a delivery's attempt number, from 1 (jetbus.Delivery.Attempt).
	AttrAttempt = attribute.Key("jetbus.attempt")
	// AttrOutcome is what became of a delivery: ack, retry, terminate, last-attempt (nak'ed
	// on its last attempt: the dead-letter safety net takes it) or manual (left to
	// Bus.Ack/Nack).
	AttrOutcome = attribute.Key("jetbus.outcome")
)

// Tracer returns tp's tracer for the instrumentation scope name, or nil when tp records
// and propagates nothing: a no-op provider, or the global one (tp nil) before
// otel.SetTracerProvider set a real one. A caller holding nil skips every tracing step, so
// tracing that is off costs nothing.
//
// The test: a span started under a remote parent gets a span ID of its own from a provider
// that traces (the SDK does, sampled or not), and the parent's, or none, from a no-op one.
// The probe span is never ended, so it is never exported.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := tp.Tracer(name)
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x6a, 0x65, 0x74, 0x62, 0x75, 0x73, 1}, SpanID: trace.SpanID{0x6a, 0x62, 1}, Remote: true,
	})
	_, probe := t.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "jetbus.probe")
	sc := probe.SpanContext()
	if !sc.IsValid() || sc.SpanID() == parent.SpanID() {
		return nil
	}
	return t
}

// Carrier is an event's trace context as a propagation.TextMapCarrier: the traceparent and
// tracestate headers read from and written to the Event's fields.
type Carrier struct{ E *jetbus.Event }

// Get implements propagation.TextMapCarrier.
func (c Carrier) Get(key string) string {
	switch key {
	case jetbus.HeaderTraceParent:
		return c.E.TraceParent
	case jetbus.HeaderTraceState:
		return c.E.TraceState
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c Carrier) Set(key, value string) {
	switch key {
	case jetbus.HeaderTraceParent:
		c.E.TraceParent = value
	case jetbus.HeaderTraceState:
		c.E.TraceState = value
	}
}

// Keys implements propagation.TextMapCarrier.
func (c Carrier) Keys() []string {
	return []string{jetbus.HeaderTraceParent, jetbus.HeaderTraceState}
}

var w3c = propagation.TraceContext{}

// Parent returns ctx with e's trace context as its remote span context, the parent of the
// next span started from it; ctx itself when e has none.
func Parent(ctx context.Context, e *jetbus.Event) context.Context {
	if e.TraceParent == "" {
		return ctx
	}
	return w3c.Extract(ctx, Carrier{e})
}

// Inject sets e's trace context to the span context of ctx, when ctx holds a valid one, and
// reports whether it did. The tracestate is the span context's (empty when it has none).
func Inject(ctx context.Context, e *jetbus.Event) bool {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return false
	}
	e.TraceParent, e.TraceState = "", ""
	w3c.Inject(ctx, Carrier{e})
	return true
}

// Link returns a link to the span of e's trace context (a replay links to the original
// event's span, a batch write to each event's), and whether e has one.
func Link(e *jetbus.Event, attrs ...attribute.KeyValue) (trace.Link, bool) {
	sc := trace.SpanContextFromContext(Parent(context.Background(), e))
	return trace.Link{SpanContext: sc, Attributes: attrs}, sc.IsValid()
}

// Messaging returns the attributes every messaging span of jetbus has: the system, the
// operation, and the destination (the topic).
func Messaging(op semconvOp, topic string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		op.typ,
		semconv.MessagingOperationName(op.name),
		semconv.MessagingDestinationName(topic),
	}
}

// semconvOp is a messaging operation: its type (of the semantic conventions) and its name.
type semconvOp struct {
	typ  attribute.KeyValue
	name string
}

// The messaging operations of jetbus's spans.
var (
	// Publish is a Bus publish: a producer span, named "publish <topic>".
	Publish = semconvOp{semconv.MessagingOperationTypeSend, "publish"}
	// Process is the handling of one delivery: a consumer span, named "process <topic>".
	Process = semconvOp{semconv.MessagingOperationTypeProcess, "process"}
)

// Name is the span name of op on topic, as the semantic conventions spell it:
// "<operation> <destination>".
func (op semconvOp) Name(topic string) string { return op.name + " " + topic }
