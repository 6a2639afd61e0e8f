package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/jsonenc"
	"github.com/jetbus/jetbus/internal/retry"
)

// Publish implements jetbus.Bus. It returns when the server has stored the event (or found
// it to be a duplicate of an event with the same ID: then Seq is the stored event's).
//
// The event continues the trace of ctx's span (or of jetbus.WithTraceContext): see "Tracing"
// in the package doc.
func (b *Bus) Publish(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error) {
	e, err := b.newEvent(topic, payload, opts)
	if err != nil {
		return nil, err
	}
	ctx, span, partition := b.startPublish(ctx, e)
	err = b.publishSync(ctx, e)
	endPublish(span, e, partition, err)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// newEvent validates and assembles the event of a publish; the trace context of its options
// is sanitized (and what was malformed counted), not refused.
func (b *Bus) newEvent(topic string, payload any, opts []jetbus.PublishOption) (*jetbus.Event, error) {
	if b.isClosed() {
		return nil, jetbus.ErrClosed
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	o, err := jetbus.ApplyPublishOptions(opts...)
	if err != nil {
		return nil, err
	}
	body, err := marshalPayload(payload)
	if err != nil {
		return nil, err
	}
	e := &jetbus.Event{
		ID:       o.ID,
		Topic:    topic,
		Key:      o.Key,
		TS:       o.TS,
		SID:      o.SID,
		Headers:  o.Headers,
		Payload:  body,
		CausedBy: o.CausedBy,
		Tags:     o.Tags,
	}
	if o.TraceParent != "" || o.TraceState != "" || o.Baggage != "" {
		e.TraceParent, e.TraceState, e.Baggage = o.TraceParent, o.TraceState, o.Baggage
		b.metrics.dropped(topic, sanitizeTrace(e, b.keepBaggage))
	}
	now := time.Now()
	if e.ID == "" {
		e.ID = newEventID(now)
	}
	if e.TS.IsZero() {
		e.TS = now
	}
	e.TS = time.UnixMilli(e.TS.UnixMilli())
	return e, nil
}

func marshalPayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case json.RawMessage:
		if !validJSON(p) {
			return nil, fmt.Errorf("%w: raw message is not valid JSON nesting at most %d levels", jetbus.ErrInvalidPayload, jetbus.MaxJSONDepth)
		}
		return p, nil
	case nil:
		return json.RawMessage("null"), nil
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetbus.ErrInvalidPayload, err)
	}
	if !jsonenc.WithinDepth(body, jetbus.MaxJSONDepth) { // consumers would refuse to decode it
		return nil, fmt.Errorf("%w: the payload nests deeper than %d levels", jetbus.ErrInvalidPayload, jetbus.MaxJSONDepth)
	}
	return body, nil
}

// prepare is the innermost publish step shared by the sync and async paths: it picks the
// partition and builds the message, refusing what the server would refuse and what the wire
// contract forbids (a middleware may have changed the event since the options were checked).
func (b *Bus) prepare(ctx context.Context, e *jetbus.Event) (*nats.Msg, error) {
	if err := checkWire(e); err != nil {
		return nil, err
	}
	if e.TraceParent != "" || e.TraceState != "" || e.Baggage != "" {
		b.metrics.dropped(e.Topic, sanitizeTrace(e, b.keepBaggage)) // a middleware may have set them
	}
	t, err := b.topics.get(ctx, e.Topic) // validates names it has not seen (a middleware may change the topic)
	if err != nil {
		return nil, err
	}
	key := e.Key
	if key == "" {
		if t.keyed {
			return nil, fmt.Errorf("%w: topic %s is keyed: every event needs a key", jetbus.ErrInvalidKey, e.Topic)
		}
		key = e.ID
	}
	e.Partition = jetbus.PartitionOf(key, t.partitions)
	msg := encode(e, t.subject(e.Partition, e.Key))
	if max := b.nc.MaxPayload(); int64(len(msg.Data)+headerSize(msg.Header)) > max {
		return nil, fmt.Errorf("%w: %d bytes of body and %d of headers, server max is %d",
			jetbus.ErrMessageTooLarge, len(msg.Data), headerSize(msg.Header), max)
	}
	return msg, nil
}

func (b *Bus) writeSync(ctx context.Context, e *jetbus.Event) error {
	msg, err := b.prepare(ctx, e)
	if err != nil {
		return err
	}
	ack, err := b.publishResending(ctx, e.Topic, msg)
	if err != nil {
		return b.publishError(e.Topic, err)
	}
	e.Seq = ack.Sequence
	b.metrics.published(e.Topic)
	return nil
}

// minSyncAttempt is the shortest wait of one attempt of a synchronous publish: longer than
// nats.go's retries of a "no responders" answer (two, 250 ms apart, by default).
const minSyncAttempt = 750 * time.Millisecond

// publishResending publishes msg and waits for its acknowledgement, sending it again each
// time the resend interval passes without one (WithResendAfter; the interval doubles), until
// ctx ends (or, without a deadline, the JetStream client's default timeout). Every copy
// carries the event's Nats-Msg-Id, so the stream stores it once. An answer that is an error
// ends it.
func (b *Bus) publishResending(ctx context.Context, topic string, msg *nats.Msg) (*natsjs.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.js.Options().DefaultTimeout)
		defer cancel()
	}
	// An attempt lasts long enough for the JetStream client's own retries of a "no
	// responders" answer (no stream, for a while after it was deleted), so that the answer
	// is seen rather than taken for a lost acknowledgement.
	wait := max(b.opts.resendAfter, minSyncAttempt)
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		ack, err := b.js.PublishMsg(actx, msg)
		unanswered := actx.Err() != nil
		cancel()
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil {
			return nil, err // the publish's own deadline
		}
		if !unanswered {
			if !b.electing(ctx, topic, err) {
				return nil, err // an answer
			}
			// No replica answers for a stream that exists: ask again shortly.
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(electionRetry):
			}
		}
		b.metrics.resent(topic)
		wait *= 2
	}
}

// electionRetry is how soon a publish is sent again after "no responders" from a stream
// that exists (its leader being elected).
const electionRetry = 250 * time.Millisecond

// electing reports whether err says that no replica of topic's stream answered although the
// stream exists: its leader is being elected (a node restarting, a cluster starting), which
// is no reason to give the publish up. A stream the server says is gone, or another error, is
// not (Publish then fails with jetbus.ErrTopicNotFound or the error). A lookup that cannot
// be answered either counts as an election.
func (b *Bus) electing(ctx context.Context, topic string, err error) bool {
	if !errors.Is(err, natsjs.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, lerr := b.js.Stream(lctx, jetbus.StreamName(topic))
	return !errors.Is(lerr, natsjs.ErrStreamNotFound)
}

func (b *Bus) publishError(topic string, err error) error {
	if errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		b.topics.forget(topic)
		return fmt.Errorf("%w: %s: %v", jetbus.ErrTopicNotFound, topic, err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: %v", jetbus.ErrMessageTooLarge, err)
	}
	return fmt.Errorf("jetbus: publish to %s: %w", topic, retry.Opaque(err))
}

// publishFuture is the jetbus.PublishFuture of Bus.PublishAsync: the acknowledgements of the
// event's message and of every extra message a publish middleware published with it.
type publishFuture struct {
	bus       *Bus
	event     *jetbus.Event
	futs      []natsjs.PubAckFuture
	duplicate bool
	span      trace.Span // the producer span, ended by the Wait that learns the result
	partition int        // its partition attribute
	sent      time.Time  // when its messages were published, for resending (awaitAck)
}

// Duplicate implements jetbus.PublishFuture.
func (f *publishFuture) Duplicate() bool { return f.duplicate }

// Event implements jetbus.PublishFuture.
func (f *publishFuture) Event() *jetbus.Event { return f.event }

// Wait implements jetbus.PublishFuture.
// The producer span ends when Wait learns the result: a future nobody waits for leaves its
// span unfinished, and unexported.
//
// A message whose acknowledgement does not come within the Bus's resend interval is sent
// again (WithResendAfter), as Publish does.
func (f *publishFuture) Wait(ctx context.Context) (*jetbus.Event, error) {
	for i, fut := range f.futs {
		ack, err := f.bus.awaitAck(ctx, f.event.Topic, fut, f.sent)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, err
			}
			err = f.bus.publishError(f.event.Topic, err)
			f.end(err)
			return nil, err
		}
		f.futs[i] = constFuture{ack: ack, msg: fut.Msg()} // a second Wait returns at once
		if i == 0 {
			f.event.Seq = ack.Sequence
			f.duplicate = ack.Duplicate
		}
	}
	f.end(nil)
	return f.event, nil
}

// awaitAck waits for fut's acknowledgement, sending its message again each time the resend
// interval passes without one since sent (the interval doubling), until ctx ends. The first
// acknowledgement of any copy is the answer; an error answer ends the wait when no other copy
// is pending, but for "no responders" from a stream that exists (electing), after which a
// copy is sent shortly. A copy that cannot be sent (the pending bound reached) is tried
// again at the next interval.
func (b *Bus) awaitAck(ctx context.Context, topic string, fut natsjs.PubAckFuture, sent time.Time) (*natsjs.PubAck, error) {
	okA, errA := fut.Ok(), fut.Err()
	var okB <-chan *natsjs.PubAck
	var errB <-chan error
	wait := b.opts.resendAfter
	timer := time.NewTimer(time.Until(sent.Add(wait)))
	defer timer.Stop()
	for {
		select {
		case ack := <-okA:
			return ack, nil
		case ack := <-okB:
			// The original may have been stored: its ID then makes the copy a duplicate of
			// this publish's own, which is no duplicate to the caller.
			ack.Duplicate = false
			return ack, nil
		case err := <-errA:
			okA, errA = nil, nil
			if okB == nil {
				if !b.electing(ctx, topic, err) {
					return nil, err
				}
				timer.Reset(electionRetry) // send a copy once the stream may have a leader
			}
		case err := <-errB:
			okB, errB = nil, nil
			if okA == nil {
				if !b.electing(ctx, topic, err) {
					return nil, err
				}
				timer.Reset(electionRetry)
			}
		case <-timer.C:
			select { // the acknowledgement may have come meanwhile (a Wait called late)
			case ack := <-okA:
				return ack, nil
			default:
			}
			if again, err := b.js.PublishMsgAsync(fut.Msg()); err == nil {
				okB, errB = again.Ok(), again.Err()
				b.metrics.resent(topic)
			}
			wait *= 2
			timer.Reset(wait)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// constFuture is an acknowledged future, kept by a publishFuture that was waited for.
type constFuture struct {
	ack *natsjs.PubAck
	msg *nats.Msg
}

func (c constFuture) Ok() <-chan *natsjs.PubAck {
	ch := make(chan *natsjs.PubAck, 1)
	ch <- c.ack
	return ch
}
func (c constFuture) Err() <-chan error { return nil }
func (c constFuture) Msg() *nats.Msg    { return c.msg }

func (f *publishFuture) end(err error) {
	endPublish(f.span, f.event, f.partition, err)
	f.span = nil
}

type asyncCollector struct{ futs []natsjs.PubAckFuture }

type asyncKey struct{}

func (b *Bus) writeAsync(ctx context.Context, e *jetbus.Event) error {
	c, _ := ctx.Value(asyncKey{}).(*asyncCollector)
	if c == nil {
		return b.writeSync(ctx, e)
	}
	fut, err := b.writeAsyncOne(ctx, e)
	if err != nil {
		return err
	}
	c.futs = append(c.futs, fut)
	return nil
}

func (b *Bus) writeAsyncOne(ctx context.Context, e *jetbus.Event) (natsjs.PubAckFuture, error) {
	msg, err := b.prepare(ctx, e)
	if err != nil {
		return nil, err
	}
	fut, err := b.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, b.publishError(e.Topic, err)
	}
	b.metrics.published(e.Topic)
	return fut, nil
}

// PublishAsync implements jetbus.AsyncPublisher: it publishes without waiting for the server,
// and the returned future's Wait gives the result. Validation and middlewares run before it
// returns, so bad input fails here and nothing is sent. It blocks while WithAsyncMaxPending
// publishes are outstanding. Use PublishAsyncComplete or Wait on every future to know all
// were stored.
func (b *Bus) PublishAsync(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (jetbus.PublishFuture, error) {
	e, err := b.newEvent(topic, payload, opts)
	if err != nil {
		return nil, err
	}
	ctx, span, partition := b.startPublish(ctx, e)
	if len(b.opts.publishMW) == 0 {
		// No middleware can publish more than this one message: skip the collector.
		fut, err := b.writeAsyncOne(ctx, e)
		if err != nil {
			endPublish(span, e, partition, err)
			return nil, err
		}
		return &publishFuture{bus: b, event: e, futs: []natsjs.PubAckFuture{fut}, span: span, partition: partition, sent: time.Now()}, nil
	}
	c := &asyncCollector{}
	if err := b.publishAsync(context.WithValue(ctx, asyncKey{}, c), e); err != nil {
		endPublish(span, e, partition, err)
		return nil, err
	}
	return &publishFuture{bus: b, event: e, futs: c.futs, span: span, partition: partition, sent: time.Now()}, nil
}

// PublishAsyncComplete is closed when every outstanding async publish is settled.
func (b *Bus) PublishAsyncComplete() <-chan struct{} { return b.js.PublishAsyncComplete() }

// checkWire refuses what cannot travel in headers: a bad or reserved header name, a control
// character in a key, SID, ID or header value.
func checkWire(e *jetbus.Event) error {
	if err := jetbus.ValidateKey(e.Key); err != nil {
		return err
	}
	if err := jetbus.ValidateHeaderValue(jetbus.HeaderSID, e.SID); err != nil {
		return fmt.Errorf("%w: %w", jetbus.ErrInvalidOption, err)
	}
	if err := jetbus.ValidateHeaderValue(jetbus.HeaderMsgID, e.ID); err != nil {
		return fmt.Errorf("%w: %w", jetbus.ErrInvalidOption, err)
	}
	for name, v := range e.Headers {
		if err := jetbus.ValidateHeaderName(name); err != nil {
			return err
		}
		if err := jetbus.ValidateHeaderValue(name, v); err != nil {
			return err
		}
	}
	return nil
}
