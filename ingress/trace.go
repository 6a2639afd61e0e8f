package ingress

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Tracing. A client's W3C trace context (traceparent, tracestate, baggage) is forwarded onto
// the stored event whether ingress traces or not (check's headers). When it traces (a tracer
// provider that records, WithTracerProvider), each message taken gets a server span
// "ingress <topic>", a child of the client's traceparent when it is valid, that lasts until
// the message is settled: stored and answered, refused (its code in error.type, its message
// in the status), dead-lettered (the DLQ's write is its child) or abandoned. The Bus's
// publish span is its child, so the stored event carries the client's trace ID. Without
// tracing none of this runs.

// scope is the instrumentation scope of ingress's spans.
const scope = "github.com/jetbus/jetbus/ingress"

// attrDuplicate says JetStream already held the event's ID: nothing new was stored.
const attrDuplicate = attribute.Key("jetbus.duplicate")

// ingressSpan is what the spans of one topic share, built once.
type ingressSpan struct {
	name  string
	attrs trace.SpanStartOption
}

func newIngressSpan(topic string) *ingressSpan {
	return &ingressSpan{
		name:  spans.Ingress.Name(topic),
		attrs: trace.WithAttributes(spans.Messaging(spans.Ingress, SubjectPrefix+topic)...),
	}
}

// errStopping ends the span of a message taken after ingress stopped taking messages.
var errStopping = errors.New("ingress is stopping: the message was turned away")

var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// startSpan starts it's span, when ingress traces: a child of the client's valid
// traceparent (and tracestate), or a root. Subjects that are not an allowed topic share the
// span name "ingress _other", so that clients cannot make span names at will; their subject
// is an attribute.
func (g *Ingress) startSpan(it *item) {
	if g.tracer == nil {
		return
	}
	parent := g.work
	if vals := it.header[jetbus.HeaderTraceParent]; len(vals) == 1 {
		parent = spans.ParentOf(parent, vals[0], strings.Join(it.header[jetbus.HeaderTraceState], ","))
	}
	sp := g.spanOf[it.topic]
	if sp == nil {
		sp = g.otherSpan
	}
	_, it.span = g.tracer.Start(parent, sp.name, serverKind, sp.attrs)
	if sp == g.otherSpan && it.span.IsRecording() {
		it.span.SetAttributes(semconv.MessagingDestinationName(it.subject))
	}
}

// traced returns ctx carrying it's span, if it has one.
func traced(ctx context.Context, it *item) context.Context {
	if it.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, it.span)
}

// endSpan ends it's span (if any, once) with what became of the message: stored (e, dup), or
// refused with r, or given up with err.
func endSpan(it *item, e *jetbus.Event, dup bool, r *refusal, err error) {
	span := it.span
	if span == nil {
		return
	}
	it.span = nil
	if span.IsRecording() {
		switch {
		case e != nil:
			span.SetAttributes(semconv.MessagingMessageID(e.ID), semconv.MessagingDestinationPartitionID(strconv.Itoa(e.Partition)), attrDuplicate.Bool(dup))
		case r != nil:
			span.SetAttributes(semconv.ErrorTypeKey.String(string(r.code)))
			span.SetStatus(codes.Error, r.Error())
		case err != nil:
			span.SetAttributes(semconv.ErrorTypeKey.String("abandoned"))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
