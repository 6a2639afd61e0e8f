package jetstream

import (
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

// Handling one delivery: decode it, run the handler chain, and settle the message with the
// server (ack, nak with the backoff delay, or term).

// handle runs the handler chain on one message and settles it.
func (pc *partConsumer) handle(msg natsjs.Msg, meta *natsjs.MsgMetadata) {
	s := pc.sub
	both := new(struct {
		d jetbus.Delivery
		e jetbus.Event
	})
	e := &both.e
	raw, decodeErr := decodeDelivery(e, msg, meta, pc.topic, pc.partition)
	if decodeErr == nil && s.opts.Filter != nil && !s.opts.Filter(e) {
		_ = msg.Ack()
		return
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
	t0 := time.Now()
	err := pc.call(d)
	for err != nil && s.opts.KeyConcurrency > 1 && !jetbus.IsPermanent(err) && d.Attempt < s.opts.MaxAttempts {
		// Retry in place so the key's next event waits for this one.
		if !pc.holdFor(msg, s.opts.Backoff(d.Attempt)) {
			break // stopping: the server gets it back
		}
		d.Attempt++
		err = pc.call(d)
	}
	took := time.Since(t0)
	pc.win.observe(took)
	if pc.gm != nil {
		pc.gm.handled(took)
	}
	if s.opts.ManualAck {
		if err == nil {
			return // settled by Bus.Ack or Bus.Nack
		}
		if !s.bus.takePending(key, msg) {
			return // already settled by the handler itself
		}
	}
	pc.settle(msg, d.Attempt, e, err)
	if s.opts.KeyConcurrency <= 1 {
		pc.handledUpTo.Store(e.Seq)
	}
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

// call runs the handler chain, turning a panic into an error.
func (pc *partConsumer) call(d *jetbus.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jetbus: handler panic: %v", r)
		}
	}()
	return pc.sub.handler(pc.sub.ctx, d)
}

// settle acknowledges, retries or terminates a message after its handler returned err.
func (pc *partConsumer) settle(msg natsjs.Msg, attempt int, e *jetbus.Event, err error) {
	s := pc.sub
	var serr error
	switch {
	case err == nil:
		serr = msg.Ack()
		pc.gm.settle(true)
		return
	case jetbus.IsPermanent(err):
		pc.log.Warn("event failed permanently, terminated", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		serr = msg.TermWithReason(truncate(err.Error(), 256))
	case attempt < s.opts.MaxAttempts:
		pc.log.Info("event failed, will retry", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		pc.naked.Store(true)
		serr = msg.NakWithDelay(s.opts.Backoff(attempt))
	default:
		pc.log.Error("event failed on its last attempt", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		pc.naked.Store(true)
		serr = msg.Nak()
	}
	pc.gm.settle(false)
	if serr != nil {
		pc.log.Warn("settle failed; the server will redeliver after the ack timeout", "id", e.ID, "err", serr)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
