package jetstream

import (
	"context"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// The second fence: every consumer is pinned (priority policy pinned_client, group
// jetbus.PriorityGroup) to one client at a time. This file holds what a partition does with
// its pin: return lost or unacknowledged deliveries to the consumer in order, hand the
// partition back on stop, and take it over from a holder known to have stopped.

// recoverDeliveries returns the partition's unacknowledged deliveries to the consumer, in
// order, when this client holds the partition. It waits briefly for this client's own acks
// to be settled first, so that few handled events are delivered again.
//
// It reports whether the partition's deliveries are accounted for. When the recovery could
// not be done (the consumer unreachable during a server restart, the reset refused, the pin
// not ours, ManualAck deliveries still held by the application) it returns false and keeps
// lastDSeq: the next pull's first delivery then shows the gap again and the recovery is
// retried, instead of later events being handled before the lost deliveries. A client that
// was never given the pin has nothing to return (true).
func (pc *partConsumer) recoverDeliveries() bool {
	if pc.pinID == "" {
		// Nothing delivered to this client yet: nothing to return. A baseline from the
		// consumer's state stays (baseline): a delivery lost before the pin was known shows
		// as a gap in the next pull, which has the pin.
		return true
	}
	b := pc.sub.bus
	if b.hasPending(pc) && !pc.awaitSettled() {
		// A reset would deliver again the events the application still holds for Bus.Ack
		// (and make the server ignore the acks it sends for them meanwhile), and it did not
		// settle them within the ack timeout: no reset yet, and no later event either. A
		// lost delivery must not come back behind later events: the server redelivers it
		// only after its ack timeout, which may be long after the pull that lost it ended
		// (a pull request the server fills after the client stopped reading it), and by then
		// the application has taken later events and may have moved past it (a
		// transactional projection's checkpoint). (When the subscription is stopping,
		// release returns the deliveries in order.)
		if !pc.sub.stopping() {
			pc.log.Warn("deliveries held past the ack timeout: the recovery of deliveries lost in flight waits for them")
		}
		return false
	}
	ctx, cancel := context.WithTimeout(pc.sub.ctx, 5*time.Second)
	defer cancel()
	info, err := pc.settledInfo(ctx, 500*time.Millisecond)
	if err != nil {
		pc.log.Debug("consumer lookup for recovery failed; retrying", "err", err)
		return false
	}
	if info.NumAckPending == 0 {
		pc.lastDSeq, pc.dseqKnown = info.Delivered.Consumer, true
		return true
	}
	if !pinnedBy(info, pc.pinID) {
		return false
	}
	if err := b.resetConsumer(ctx, pc.stream, pc.name, 0); err != nil {
		pc.log.Warn("returning lost deliveries failed; retrying", "err", err)
		return false
	}
	// The next delivery is the consumer's first (1) again. Not the sequence the reset's
	// answer reports: a single-replica consumer resumes delivering before it answers, and a
	// request of this client the server still fills may have taken that first delivery.
	pc.lastDSeq, pc.dseqKnown = 0, true
	return true
}

// awaitSettled waits, at most the ack timeout, for the application to settle the ManualAck
// deliveries it holds (a batching handler acknowledges its batch once written), so that the
// recovery can return the lost deliveries in order without delivering the held ones again.
// It reports whether they were settled.
func (pc *partConsumer) awaitSettled() bool {
	b := pc.sub.bus
	deadline := time.Now().Add(pc.sub.opts.AckTimeout)
	for b.hasPending(pc) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-pc.sub.stopCh:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// settledInfo flushes this client's acks and returns the consumer's state once the server
// has processed them: nothing is pending, or the ack floor reached the last event this client
// handled (deliveries lost in flight stay pending, so that alone may never come) and no nak
// was sent since the last time (a nak leaves no trace in the ack floor: only "nothing
// pending" shows it was processed), or wait has passed.
func (pc *partConsumer) settledInfo(ctx context.Context, wait time.Duration) (*natsjs.ConsumerInfo, error) {
	b := pc.sub.bus
	if err := b.nc.FlushWithContext(ctx); err != nil {
		pc.log.Debug("flush failed", "err", err)
	}
	deadline := time.Now().Add(wait)
	for {
		// Each lookup is bounded (apiPolicy) and asked again: an answer lost with a stopped
		// node would otherwise hold the release or the recovery for all of ctx.
		info, err := b.consumerInfo(ctx, pc.stream, pc.name)
		if err != nil {
			return nil, err
		}
		upTo := pc.handledUpTo.Load()
		caughtUp := upTo > 0 && info.AckFloor.Stream >= upTo && !pc.naked.Load()
		if info.NumAckPending == 0 || caughtUp || time.Now().After(deadline) {
			pc.naked.Store(false)
			return info, nil
		}
		select {
		case <-ctx.Done():
			return info, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func pinnedBy(info *natsjs.ConsumerInfo, pin string) bool {
	for _, g := range info.PriorityGroups {
		if g.Group == jetbus.PriorityGroup {
			return g.PinnedClientID == pin
		}
	}
	return false
}

// release hands the partition back when the subscription stops: deliveries still
// unacknowledged at the server (fetched but not started, a retry waiting for its backoff, a
// ManualAck delivery not settled yet, messages the server sent to the pull as it was closing)
// are returned by resetting the consumer to its ack floor once this client's acks are
// settled, so the next owner gets them first and in order; then the pin is released, so the
// next subscriber does not wait for the pin TTL.
func (pc *partConsumer) release() {
	pin := pc.pinID
	if pin == "" {
		return // never consumed: nothing to hand back, and the pin is someone else's
	}
	b := pc.sub.bus
	pc.mu.Lock()
	it := pc.iter
	pc.mu.Unlock()
	pc.waitIterClosed(it, "releasing") // what the server still sent to the pull is counted below
	// Deliveries the application still held for Bus.Ack are returned with the others by the
	// reset below; only when this client cannot reset are they nak'ed instead.
	held := b.takePendingOf(pc.sub, pc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := pc.settledInfo(ctx, time.Second)
	if err != nil {
		pc.log.Debug("consumer lookup on release failed", "err", err)
		nakAll(held)
		return
	}
	if !pinnedBy(info, pin) {
		nakAll(held)
		return // someone else holds the partition now: its state is not ours to touch
	}
	for _, p := range held {
		p.pc.gm.settle(false)
	}
	if info.NumAckPending > 0 {
		if err := b.resetConsumer(ctx, pc.stream, pc.name, 0); err != nil {
			pc.log.Warn("returning unacknowledged deliveries failed; they come back after the ack timeout", "err", err)
		}
	}
	if err := b.unpin(ctx, pc.stream, pc.name); err != nil {
		pc.log.Debug("unpin failed", "err", err)
	}
}

// reclaimPin unpins the consumer when this client holds its pin through a handle it lost: the
// new handle does not know the pin and would wait for it to time out. A pin held by another
// client is left alone.
func (pc *partConsumer) reclaimPin() {
	if pc.pinID == "" {
		return
	}
	b := pc.sub.bus
	ctx, cancel := context.WithTimeout(pc.sub.ctx, 5*time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, pc.stream, pc.name)
	if err != nil || !pinnedBy(cons.CachedInfo(), pc.pinID) {
		return
	}
	if err := b.unpin(ctx, pc.stream, pc.name); err != nil {
		pc.log.Debug("unpin failed; the pin times out instead", "err", err)
	}
}

// takeOver takes the partition from a previous holder that is known to have stopped (see
// SubscribePartition): it unpins it and returns its unacknowledged deliveries to the consumer so
// they are delivered first, in order, instead of after the ack timeout.
func (pc *partConsumer) takeOver() error {
	b := pc.sub.bus
	ctx, cancel := context.WithTimeout(pc.sub.ctx, 10*time.Second)
	defer cancel()
	if err := b.unpin(ctx, pc.stream, pc.name); err != nil {
		return err
	}
	info, err := b.consumerInfo(ctx, pc.stream, pc.name)
	if err != nil {
		return err
	}
	// The consumer sequence from here on is the baseline of gap detection: a delivery the
	// server still sends to the previous holder's pull (a crashed process's request it has
	// not dropped yet) shows as a gap in this client's first delivery, and is recovered.
	pc.lastDSeq, pc.dseqKnown = info.Delivered.Consumer, true
	if info.NumAckPending > 0 {
		if err := b.resetConsumer(ctx, pc.stream, pc.name, 0); err != nil {
			return err
		}
		pc.lastDSeq = 0 // the next delivery is the consumer's first again (recoverDeliveries)
	}
	return nil
}

func (b *Bus) unpin(ctx context.Context, stream, consumer string) error {
	return retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		s, err := b.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.UnpinConsumer(ctx, consumer, jetbus.PriorityGroup)
	})
}
