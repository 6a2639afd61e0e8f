package jetstream

import (
	"context"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Handling one delivery: decode it, run the handler chain, and settle the message with the
// server (ack, nak with the backoff delay, or term).

// deliveryEvent is a delivery with its event and the message's metadata, allocated
// together: one allocation per delivery (an unordered pull's message holds it).
type deliveryEvent struct {
	d    jetbus.Delivery
	e    jetbus.Event
	meta natsjs.MsgMetadata
}

// handle runs the handler chain on one message, whose metadata is both.meta, and settles it.
// It returns when the handler ended, for the pull window (one clock read fewer per delivery).
func (pc *partConsumer) handle(msg natsjs.Msg, both *deliveryEvent) time.Time {
	s := pc.sub
	meta := &both.meta
	e := &both.e
	raw, drops, decodeErr := decodeDelivery(e, msg, meta, pc.topic, pc.partition, s.bus.keepBaggage)
	if drops != 0 {
		s.bus.metrics.dropped(pc.topic, drops)
	}
	if decodeErr == nil && s.opts.Filter != nil && !s.opts.Filter(e) {
		_ = msg.Ack()
		return time.Now()
	}
	d := &both.d
	*d = jetbus.Delivery{
		Event:       e,
		Group:       s.group,
		Attempt:     int(meta.NumDelivered),
		MaxAttempts: s.opts.MaxAttempts,
		Msg:         raw,
		DecodeErr:   decodeErr,
	}
	var key pendingKey
	if s.opts.ManualAck {
		key = pendingKey{topic: pc.topic, group: s.group, id: e.ID}
		s.bus.addPending(key, &pendingDelivery{id: e.ID, msg: msg, sub: s, pc: pc, attempt: d.Attempt})
	}
	if pc.gm != nil {
		pc.gm.deliver()
	}
	ctx, span, first := s.ctx, trace.Span(nil), d.Attempt
	if pc.span != nil {
		ctx, span = pc.span.start(ctx, s.bus.tracer, d)
	}
	t0 := time.Now()
	err := pc.call(ctx, d)
	for err != nil && s.opts.KeyConcurrency > 1 && !s.opts.Unordered && !jetbus.IsPermanent(err) && d.Attempt < s.opts.MaxAttempts {
		// Retry in place so the key's next event waits for this one (an unordered group has
		// no order to keep: its retries go through the server).
		if span != nil {
			span.AddEvent("retry", trace.WithAttributes(spans.AttrAttempt.Int(d.Attempt), attribute.String("error", err.Error())))
		}
		if !pc.holdFor(msg, s.opts.Backoff(d.Attempt)) {
			break // stopping: the server gets it back
		}
		d.Attempt++
		err = pc.call(ctx, d)
	}
	took := time.Since(t0)
	end := t0.Add(took)
	pc.win.observe(took)
	if pc.gm != nil {
		pc.gm.handled(took)
	}
	if s.opts.ManualAck {
		if err == nil {
			endProcess(span, d, first, nil, outcomeManual)
			return end // settled by Bus.Ack or Bus.Nack
		}
		if !s.bus.takePending(key, msg) {
			endProcess(span, d, first, err, outcomeManual)
			return end // already settled by the handler itself
		}
	}
	outcome := pc.settle(msg, d.Attempt, e, err)
	endProcess(span, d, first, err, outcome)
	if s.opts.KeyConcurrency <= 1 {
		pc.handledUpTo.Store(e.Seq)
	}
	return end
}

// holdFor waits d while keeping msg's ack deadline alive. It returns false when the
// subscription stops (without draining) meanwhile.
func (pc *partConsumer) holdFor(msg natsjs.Msg, d time.Duration) bool {
	tick := max(pc.sub.opts.AckTimeout/3, time.Millisecond)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		t := time.NewTimer(min(left, tick))
		select {
		case <-pc.sub.stopCh:
			t.Stop()
			if !pc.sub.draining.Load() {
				return false
			}
			<-t.C
		case <-t.C:
		}
		_ = msg.InProgress()
	}
}

// call runs the handler chain with ctx (the subscription's, carrying the delivery's span
// when the Bus traces), turning a panic into an error.
func (pc *partConsumer) call(ctx context.Context, d *jetbus.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jetbus: handler panic: %v", r)
		}
	}()
	return pc.sub.handler(ctx, d)
}

// settle acknowledges, retries or terminates a message after its handler returned err, and
// says which it did.
func (pc *partConsumer) settle(msg natsjs.Msg, attempt int, e *jetbus.Event, err error) (outcome string) {
	s := pc.sub
	var serr error
	switch {
	case err == nil:
		serr = msg.Ack()
		pc.gm.settle(true)
		return outcomeAck
	case jetbus.IsPermanent(err):
		pc.log.Warn("event failed permanently, terminated", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		serr = msg.TermWithReason(truncate(err.Error(), 256))
		outcome = outcomeTerminate
	case attempt < s.opts.MaxAttempts:
		pc.log.Info("event failed, will retry", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		pc.naked.Store(true)
		serr = msg.NakWithDelay(s.opts.Backoff(attempt))
		outcome = outcomeRetry
	default:
		pc.log.Error("event failed on its last attempt", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		pc.naked.Store(true)
		serr = msg.Nak()
		outcome = outcomeLastAttempt
	}
	pc.gm.settle(false)
	if serr != nil {
		pc.log.Warn("settle failed; the server will redeliver after the ack timeout", "id", e.ID, "err", serr)
	}
	return outcome
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
