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

// The spans' attributes: OpenTelemetry's SDK spends about 200 ns per attribute of a span
// on this project's benchmark machine (it copies them into the start configuration, then
// into the span, and deduplicates them in a map when the span ends), whether the span is
// sampled or not for those given at its start. So a span starts with the attributes the
// messaging conventions name for sampling decisions (system, operation, destination), built
// once per topic or partition consumer as a start option; the others are set in one call,
// and only on a span that records; the end adds only what went wrong.

// publishSpan is what the producer spans of one topic share: the name and the attributes that
// do not change.
type publishSpan struct {
	name  string
	attrs trace.SpanStartOption // the static attributes, as an option built once
}

// publishSpanOf returns topic's publishSpan, built once.
func (b *Bus) publishSpanOf(topic string) *publishSpan {
	if ps, ok := b.pubSpans.Load(topic); ok {
		return ps.(*publishSpan)
	}
	ps, _ := b.pubSpans.LoadOrStore(topic, &publishSpan{name: spans.Publish.Name(topic), attrs: trace.WithAttributes(spans.Messaging(spans.Publish, topic)...)})
	return ps.(*publishSpan)
}

// startPublish gives e (its options' trace context already sanitized) the trace context it
// is published with and, when the Bus traces, starts its producer span, returned with the
// context that carries it (nil without tracing). The parent is ctx's span, or else the
// trace context of jetbus.WithTraceContext; the event carries the producer span's context.
// Without tracing, the event carries ctx's span context when there is one, or else the
// options' as given. The partition attribute is the one the cached partition count gives
// (-1: none cached).
func (b *Bus) startPublish(ctx context.Context, e *jetbus.Event) (context.Context, trace.Span, int) {
	if b.keepBaggage != nil && e.Baggage == "" {
		if bg := baggage.FromContext(ctx); bg.Len() > 0 {
			e.Baggage = bg.String()
			b.metrics.dropped(e.Topic, sanitizeTrace(e, b.keepBaggage))
		}
	}
	if b.tracer == nil {
		spans.Inject(ctx, e)
		return ctx, nil, -1
	}
	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() {
		parent = spans.Parent(ctx, e)
	}
	ps := b.publishSpanOf(e.Topic)
	ctx, span := b.tracer.Start(parent, ps.name, producer, ps.attrs)
	spans.Inject(ctx, e)
	if !span.IsRecording() {
		return ctx, span, -1
	}
	partition := -1
	if n := b.topics.peek(e.Topic); n > 0 {
		key := e.Key
		if key == "" {
			key = e.ID
		}
		partition = jetbus.PartitionOf(key, n)
		span.SetAttributes(semconv.MessagingMessageID(e.ID), semconv.MessagingDestinationPartitionID(strconv.Itoa(partition)))
	} else {
		span.SetAttributes(semconv.MessagingMessageID(e.ID))
	}
	return ctx, span, partition
}

// endPublish ends a producer span (nil: none) with the publish's result; partition is the
// attribute startPublish gave it.
func endPublish(span trace.Span, e *jetbus.Event, partition int, err error) {
	if span == nil {
		return
	}
	switch {
	case !span.IsRecording():
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case e.Partition != partition: // not cached at the start, or a middleware moved the key
		span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(e.Partition)))
	}
	span.End()
}

// processSpan is what a partition consumer keeps to start its deliveries' spans: the name
// and the attributes every one of them shares.
type processSpan struct {
	name  string
	attrs trace.SpanStartOption // the attributes for sampling, as an option built once
	group attribute.KeyValue
	part  attribute.KeyValue
}

func newProcessSpan(topic, group string, partition int) *processSpan {
	return &processSpan{
		name:  spans.Process.Name(topic),
		attrs: trace.WithAttributes(spans.Messaging(spans.Process, topic)...),
		group: semconv.MessagingConsumerGroupName(group),
		part:  semconv.MessagingDestinationPartitionID(strconv.Itoa(partition)),
	}
}

// The span kinds, as options built once.
var (
	producer = trace.WithSpanKind(trace.SpanKindProducer)
	consumer = trace.WithSpanKind(trace.SpanKindConsumer)
)

// start starts the consumer span of a delivery, a child of the event's trace context, and
// returns ctx carrying it (and the event's baggage).
func (ps *processSpan) start(ctx context.Context, tr trace.Tracer, d *jetbus.Delivery) (context.Context, trace.Span) {
	ctx = spans.Parent(ctx, d.Event)
	if d.Baggage != "" {
		if bg, err := baggage.Parse(d.Baggage); err == nil {
			ctx = baggage.ContextWithBaggage(ctx, bg)
		}
	}
	ctx, span := tr.Start(ctx, ps.name, consumer, ps.attrs)
	if span.IsRecording() {
		span.SetAttributes(ps.group, ps.part, semconv.MessagingMessageID(d.ID), spans.AttrAttempt.Int(d.Attempt))
	}
	return ctx, span
}

// endProcess ends a consumer span (nil: none). A delivery acknowledged at its first attempt
// adds nothing; otherwise the span gets its last attempt, what became of the delivery
// (outcome) and the handler's error.
func endProcess(span trace.Span, d *jetbus.Delivery, firstAttempt int, err error, outcome string) {
	if span == nil {
		return
	}
	switch {
	case !span.IsRecording():
	case err != nil:
		span.SetAttributes(spans.AttrAttempt.Int(d.Attempt), spans.AttrOutcome.String(outcome))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case d.Attempt != firstAttempt || outcome != outcomeAck:
		span.SetAttributes(spans.AttrAttempt.Int(d.Attempt), spans.AttrOutcome.String(outcome))
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
