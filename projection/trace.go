package projection

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Tracing: see the package doc. Without a tracer (tracing off) none of this runs.

// scope is the instrumentation scope of the projections' spans.
const scope = "github.com/jetbus/jetbus/projection"

// attrProjection names the projection of a span.
const attrProjection = attribute.Key("jetbus.projection")

var (
	clientKind   = trace.WithSpanKind(trace.SpanKindClient)
	internalKind = trace.WithSpanKind(trace.SpanKindInternal)
)

// spanContextOf returns the span an entry's event is linked to: the consumer span of ctx,
// the delivery's handler context, or else the event's own trace context.
func spanContextOf(ctx context.Context, d *jetbus.Delivery) trace.SpanContext {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc
	}
	l, _ := spans.Link(d.Event)
	return l.SpanContext
}

// traced returns ctx carrying en's span context as its parent (ctx itself when it has none),
// so that what is done for en alone, its dead letter, is in its trace.
func (en *entry) traced(ctx context.Context) context.Context {
	if !en.sc.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, en.sc)
}

// writeTarget is the database, collection and operation of a strategy's writes, as span
// attributes.
func writeTarget(database, collection, operation string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.DBSystemNameMongoDB, semconv.DBNamespace(database), semconv.DBOperationName(operation)}
	if collection != "" {
		attrs = append(attrs, semconv.DBCollectionName(collection))
	}
	return attrs
}

// startWrite starts the span of one attempt at writing batch b, when the engine traces. It
// links to the sampled events' spans first (an unsampled one's span is never exported: its
// link leads nowhere), up to spans.MaxLinks; the sampled ones beyond are linked from
// "projection links <projection>" spans, children of the write span, spans.MaxLinks each, so
// that every sampled event reaches the write of its batch whatever the batch's size. Unsampled
// links that do not fit are counted in jetbus.links_dropped.
func (e *engine) startWrite(ctx context.Context, b *batch, attempt int) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	var parent trace.SpanContext
	var sampled, unsampled []trace.Link
	for _, en := range b.entries {
		if !en.sc.IsValid() {
			continue
		}
		if !parent.IsSampled() && (en.sc.IsSampled() || !parent.IsValid()) {
			parent = en.sc
		}
		if en.sc.IsSampled() {
			sampled = append(sampled, trace.Link{SpanContext: en.sc})
		} else {
			unsampled = append(unsampled, trace.Link{SpanContext: en.sc})
		}
	}
	links, rest := sampled[:min(len(sampled), spans.MaxLinks)], sampled[min(len(sampled), spans.MaxLinks):]
	room := min(len(unsampled), spans.MaxLinks-len(links))
	links = append(links[:len(links):len(links)], unsampled[:room]...)
	dropped := len(unsampled) - room
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	ctx, span := e.tracer.Start(ctx, "projection write "+e.name, clientKind, trace.WithLinks(links...),
		trace.WithAttributes(e.target...))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(attrProjection.String(e.name), semconv.MessagingDestinationName(b.topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(b.p)), semconv.MessagingConsumerGroupName(e.group),
		semconv.MessagingBatchMessageCount(len(b.entries)), spans.AttrAttempt.Int(attempt))
	if dropped > 0 {
		span.SetAttributes(spans.AttrLinksDropped.Int(dropped))
	}
	for len(rest) > 0 {
		n := min(len(rest), spans.MaxLinks)
		_, more := e.tracer.Start(ctx, "projection links "+e.name, internalKind, trace.WithLinks(rest[:n]...),
			trace.WithAttributes(attrProjection.String(e.name)))
		more.End()
		rest = rest[n:]
	}
	return ctx, span
}

// endWrite ends a write's span (nil: none) with its error.
func endWrite(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
