package dlq

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

// Tracing. With a tracer provider that records (WithTracerProvider), the Queue traces:
//
//   - "dead-letter <topic>" (producer): one write of a dead letter, in the failing
//     delivery's trace: a child of ctx's span (the handler's consumer span for the
//     middleware, ingress's span for its refusals), else of the event's own trace context
//     (the safety net's letters), else a root. The letter keeps the event's traceparent,
//     tracestate and baggage among the headers it copies.
//   - "dlq replay" (internal): one Replay, a child of ctx's span or a root, with its counts.
//   - "replay <topic>" (internal): the republish of one letter, a child of the original
//     event's trace context (the letter's traceparent), linked to it (jetbus.link=original)
//     and to the "dlq replay" span (jetbus.link=replay): the Bus's "publish <topic>" span is
//     its child, so the replayed event continues the original's trace, and its trace shows
//     the failure, the dead letter and the replay one after the other. A letter without a
//     trace context is replayed under the "dlq replay" span. Without a Bus that traces, the
//     replayed event carries the replay span's context, or else the letter's trace context
//     as it was.
//
// Without tracing none of this runs, and the replayed event still carries the letter's trace
// context.

// scope is the instrumentation scope of the Queue's spans.
const scope = "github.com/jetbus/jetbus/dlq"

// Attributes of the Queue's spans beside the messaging conventions'.
const (
	attrReason = attribute.Key("jetbus.dlq.reason")
	// attrSeq is the dead letter's sequence in its stream; attrStream the stream.
	attrSeq    = attribute.Key("jetbus.dlq.seq")
	attrStream = attribute.Key("jetbus.dlq.stream")
	// attrLink says what a link of a replay span points to: "original" (the event that was
	// dead-lettered) or "replay" (the Replay it belongs to).
	attrLink = attribute.Key("jetbus.link")
	// attrSelected, attrReplayed and attrFailed are a Replay's counts.
	attrSelected = attribute.Key("jetbus.dlq.selected")
	attrReplayed = attribute.Key("jetbus.dlq.replayed")
	attrFailed   = attribute.Key("jetbus.dlq.failed")
)

var (
	producerKind = trace.WithSpanKind(trace.SpanKindProducer)
	internalKind = trace.WithSpanKind(trace.SpanKindInternal)
)

// spanTopic is o's topic as span names show it: "_other" for a topic its rejecter does not
// serve and "_unrouted" for no valid topic, so that clients cannot mint span names.
func (o *origin) spanTopic() string {
	switch {
	case o.rejected && jetbus.ValidateTopic(o.topic) != nil:
		return unrouted
	case o.unlisted:
		return OtherTopic
	}
	return o.topic
}

// startStore starts the span of o's write, when the Queue traces (nil span otherwise).
func (q *Queue) startStore(ctx context.Context, o *origin) (context.Context, trace.Span) {
	if q.tracer == nil {
		return ctx, nil
	}
	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() {
		parent = spans.ParentOf(ctx, o.header.Get(jetbus.HeaderTraceParent), o.header.Get(jetbus.HeaderTraceState))
	}
	topic := o.spanTopic()
	ctx, span := q.tracer.Start(parent, spans.DeadLetter.Name(topic), producerKind,
		trace.WithAttributes(spans.Messaging(spans.DeadLetter, o.dlqSubject())...))
	if span.IsRecording() {
		span.SetAttributes(attrReason.String(o.reason), semconv.MessagingConsumerGroupName(o.group),
			semconv.MessagingMessageID(o.msgID()), spans.AttrAttempt.Int(o.attempts))
	}
	return ctx, span
}

// endSpan ends span (nil: none) with err, or with the stream and sequence (seq 0: none).
func endSpan(span trace.Span, stream string, seq uint64, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if seq > 0 {
			span.SetAttributes(attrStream.String(stream), attrSeq.String(strconv.FormatUint(seq, 10)))
		}
	}
	span.End()
}

// startReplayRun starts the span of one Replay, when the Queue traces.
func (q *Queue) startReplayRun(ctx context.Context, f Filter) (context.Context, trace.Span) {
	if q.tracer == nil {
		return ctx, nil
	}
	ctx, span := q.tracer.Start(ctx, "dlq replay", internalKind)
	if span.IsRecording() && f.Topic != "" {
		span.SetAttributes(semconv.MessagingDestinationName(f.Topic))
	}
	return ctx, span
}

// endReplayRun ends the span of a Replay with its report and error.
func endReplayRun(span trace.Span, rep *ReplayReport, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		if rep != nil {
			span.SetAttributes(attrSelected.Int(rep.Selected), attrReplayed.Int(rep.Replayed), attrFailed.Int(rep.FailedCount))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// startReplay starts the span of l's republish, when the Queue traces: a child of the
// original event's trace context, linked to it and to the Replay's span (ctx's); or, for a
// letter without one, a child of ctx's span.
func (q *Queue) startReplay(ctx context.Context, l *Letter) (context.Context, trace.Span) {
	if q.tracer == nil {
		return ctx, nil
	}
	run := trace.SpanContextFromContext(ctx)
	parent := spans.ParentOf(ctx, l.Header.Get(jetbus.HeaderTraceParent), l.Header.Get(jetbus.HeaderTraceState))
	original := trace.SpanContextFromContext(parent)
	var links []trace.Link
	if original.IsValid() && !original.Equal(run) {
		links = append(links, trace.Link{SpanContext: original, Attributes: []attribute.KeyValue{attrLink.String("original")}})
		if run.IsValid() {
			links = append(links, trace.Link{SpanContext: run, Attributes: []attribute.KeyValue{attrLink.String("replay")}})
		}
	}
	ctx, span := q.tracer.Start(parent, spans.Replay.Name(l.Topic), internalKind, trace.WithLinks(links...),
		trace.WithAttributes(spans.Messaging(spans.Replay, l.Topic)...))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingMessageID(ReplayID(l)), semconv.MessagingConsumerGroupName(l.Group),
			attrStream.String(l.Stream), attrSeq.String(strconv.FormatUint(l.Seq, 10)), attrReason.String(l.Reason))
	}
	return ctx, span
}
