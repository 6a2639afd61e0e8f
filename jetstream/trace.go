package jetstream

import (
	"context"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Tracing: the trace context of events (docs/wire.md, "Trace context") and the Bus's spans.
// With no tracer (tracing off, the default) nothing here runs beyond a look at ctx's span on
// publish and the trace headers' validation when a message has them.

// scope is the instrumentation scope of the Bus's spans.
const scope = "github.com/jetbus/jetbus/jetstream"

// traceDrops says which trace context headers were dropped from an event as malformed.
type traceDrops uint8

const (
	dropTraceParent traceDrops = 1 << iota // with its tracestate
	dropTraceState
	dropBaggage
)

// sanitizeTrace drops what the wire contract refuses from e's trace context: a malformed
// traceparent (with its tracestate), a malformed tracestate, a tracestate without a
// traceparent, a malformed baggage; and the baggage members of keys keepBaggage does not
// accept (all of them when it is nil). It reports the malformed ones.
func sanitizeTrace(e *jetbus.Event, keepBaggage func(string) bool) traceDrops {
	var d traceDrops
	if e.TraceParent != "" && !jetbus.ValidTraceParent(e.TraceParent) {
		e.TraceParent, e.TraceState = "", ""
		d |= dropTraceParent
	}
	switch {
	case e.TraceState == "":
	case e.TraceParent == "":
		e.TraceState = "" // meaningless alone (W3C): ignored, as nothing is wrong with it
	case !jetbus.ValidTraceState(e.TraceState):
		e.TraceState = ""
		d |= dropTraceState
	}
	if e.Baggage != "" {
		if keepBaggage == nil {
			e.Baggage = ""
		} else if kept, ok := jetbus.FilterBaggage(e.Baggage, keepBaggage); ok {
			e.Baggage = kept
		} else {
			e.Baggage = ""
			d |= dropBaggage
		}
	}
	return d
}

// baggageFilter returns the test of WithBaggageKeys' keys, nil when there are none.
func baggageFilter(keys []string) func(string) bool {
	if len(keys) == 0 {
		return nil
	}
	keys = slices.Clone(keys)
	return func(k string) bool { return slices.Contains(keys, k) }
}

// startPublish gives e (its options' trace context already sanitized) the trace context it
// is published with and, when the Bus traces, starts its producer span, returned with the
// context that carries it (nil without tracing). The parent is ctx's span, or else the
// trace context of jetbus.WithTraceContext; the event carries the producer span's context.
// Without tracing, the event carries ctx's span context when there is one, or else the
// options' as given.
func (b *Bus) startPublish(ctx context.Context, e *jetbus.Event) (context.Context, trace.Span) {
	if b.keepBaggage != nil && e.Baggage == "" {
		if bg := baggage.FromContext(ctx); bg.Len() > 0 {
			e.Baggage = bg.String()
			b.metrics.dropped(e.Topic, sanitizeTrace(e, b.keepBaggage))
		}
	}
	if b.tracer == nil {
		spans.Inject(ctx, e)
		return ctx, nil
	}
	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() {
		parent = spans.Parent(ctx, e)
	}
	ctx, span := b.tracer.Start(parent, spans.Publish.Name(e.Topic), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(spans.Messaging(spans.Publish, e.Topic)...),
		trace.WithAttributes(semconv.MessagingMessageID(e.ID)))
	spans.Inject(ctx, e)
	return ctx, span
}

// endPublish ends a producer span (nil: none) with the publish's result.
func endPublish(span trace.Span, e *jetbus.Event, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(e.Partition)), spans.AttrSeq.Int64(int64(e.Seq)))
	}
	span.End()
}

// processSpan is what a partition consumer keeps to start its deliveries' spans: the name
// and the attributes every one of them shares.
type processSpan struct {
	name  string
	attrs []attribute.KeyValue
}

func newProcessSpan(topic, group string, partition int) *processSpan {
	return &processSpan{
		name: spans.Process.Name(topic),
		attrs: append(spans.Messaging(spans.Process, topic),
			semconv.MessagingConsumerGroupName(group),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(partition))),
	}
}

// startProcess starts the consumer span of a delivery, a child of the event's trace context,
// and returns ctx carrying it (and the event's baggage).
func (ps *processSpan) start(ctx context.Context, tr trace.Tracer, d *jetbus.Delivery) (context.Context, trace.Span) {
	ctx = spans.Parent(ctx, d.Event)
	if d.Baggage != "" {
		if bg, err := baggage.Parse(d.Baggage); err == nil {
			ctx = baggage.ContextWithBaggage(ctx, bg)
		}
	}
	return tr.Start(ctx, ps.name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(ps.attrs...),
		trace.WithAttributes(semconv.MessagingMessageID(d.ID), spans.AttrAttempt.Int(d.Attempt), spans.AttrSeq.Int64(int64(d.Seq))))
}

// endProcess ends a consumer span (nil: none) with the handler's result and what became of
// the delivery.
func endProcess(span trace.Span, d *jetbus.Delivery, err error, outcome string) {
	if span == nil {
		return
	}
	span.SetAttributes(spans.AttrAttempt.Int(d.Attempt), spans.AttrOutcome.String(outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Outcomes of a delivery (spans.AttrOutcome).
const (
	outcomeAck         = "ack"
	outcomeRetry       = "retry"
	outcomeTerminate   = "terminate"
	outcomeLastAttempt = "last-attempt"
	outcomeManual      = "manual"
)
