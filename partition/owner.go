package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// own takes and serves partition p until ctx is done. It runs in the runner goroutine that
// Subscriber.reconcile starts for p, under ctx: the runner's context, cancelled when the
// assignment moves p elsewhere or the subscriber stops.
func (s *Subscriber) own(ctx context.Context, p int) {
	backoff := retry.Backoff{Min: s.to.Renew / 4, Max: s.to.Renew / 4}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, s.to.LeaseTTL)
		lease, err := s.g.TryAcquire(actx, p)
		cancel()
		if errors.Is(err, ErrLeaseHeld) {
			// Wait for the release or the expiry (or, fenced, the holder found gone); look
			// again after two lease TTLs in case a marker was missed.
			s.awaitLease(ctx, p)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.setErr(err)
				s.log.Warn("acquire failed", "partition", p, "err", err)
				backoff.Wait(ctx.Done())
			}
			continue
		}
		if s.serve(ctx, p, lease) != nil {
			backoff.Wait(ctx.Done())
		}
	}
}

// ownership is one partition's run under a lease, from acquisition to release.
//
// Goroutines and contexts:
//
//   - The owner (the runner goroutine, in serve) runs under ctx, the runner's context.
//     ctx ending is the signal to hand the partition off.
//   - The keeper renews the lease under its own context, derived from ctx without ctx's
//     cancellation: it must keep renewing while the subscription drains after ctx ended. The
//     owner stops it (stopKeeper) and waits for it (keeperDone) before releasing. It reports
//     a lost lease on lost, which the owner treats as "stop now".
//   - The Bus subscription runs under the subscriber's subCtx, which outlives every owner:
//     the owner ends it with Stop or Drain, never by cancellation.
//
// The two fences: the lease (held from acquisition until release, renewed by the keeper)
// and the Bus's pinned consumer (taken over by SubscribePartition). A partition whose previous
// owner did not release its lease waits for that owner's deliveries to time out first.
//
// Shutdown order. Handoff or stop: stop (or drain) the subscription, flush the naks that
// returned its unstarted deliveries, stop the keeper, release the lease. Lease lost: stop the
// subscription at once, stop the keeper, mark the partition dirty (the lease is gone; its
// deliveries may be unsettled), no release.
type ownership struct {
	s     *Subscriber
	p     int
	lease *Lease

	stopKeeper context.CancelFunc
	keeperDone chan struct{}
	lost       chan error
}

// serve consumes partition p under lease until ctx is done (then it stops and releases) or
// the lease is lost (then it stops at once).
func (s *Subscriber) serve(ctx context.Context, p int, lease *Lease) error {
	o := &ownership{s: s, p: p, lease: lease, keeperDone: make(chan struct{}), lost: make(chan error, 1)}
	kctx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	o.stopKeeper = stopKeeper
	go func() {
		defer close(o.keeperDone)
		err := lease.Keep(kctx, func(err error) { s.log.Warn("renew failed", "partition", p, "err", err) })
		if err != nil {
			o.lost <- err
		}
	}()
	// A fenced handler need not wait for a previous owner's handler to end (Config.Fenced).
	if err := o.waitOwnUnsettled(ctx); err != nil {
		return o.fail(err)
	}
	if lease.Previous != LeaseReleased && !s.cfg.Fenced {
		if err := o.waitPrevious(ctx); err != nil {
			return o.fail(err)
		}
	}
	if ctx.Err() != nil {
		o.release()
		return nil
	}
	return o.consume(ctx)
}

// release stops the keeper and deletes the lease, so the next owner starts at once.
func (o *ownership) release() {
	o.stopKeeper()
	<-o.keeperDone
	rctx, cancel := context.WithTimeout(context.Background(), o.s.to.LeaseTTL)
	defer cancel()
	if err := o.lease.Release(rctx); err != nil {
		o.s.log.Warn("release failed; the lease will expire", "partition", o.p, "err", err)
	}
}

// fail ends an ownership whose lease is lost.
func (o *ownership) fail(err error) error {
	o.stopKeeper()
	<-o.keeperDone
	// The subscription was stopped in a hurry, perhaps unable to return its deliveries: if
	// this member takes the partition again, it waits for them like a new owner would.
	o.s.mu.Lock()
	o.s.dirty[o.p] = time.Now()
	o.s.mu.Unlock()
	o.s.setErr(err)
	o.s.log.Warn("lease lost, partition stopped", "partition", o.p, "err", err)
	return err
}

// waitOwnUnsettled waits, when this member lost p earlier without settling its deliveries,
// until they are due for redelivery. It returns the keeper's error if the lease is lost
// meanwhile.
func (o *ownership) waitOwnUnsettled(ctx context.Context) error {
	s := o.s
	s.mu.Lock()
	dirtyAt, dirty := s.dirty[o.p]
	s.mu.Unlock()
	if !dirty || s.cfg.Fenced {
		return nil
	}
	wait := time.Until(dirtyAt.Add(s.ackWait + s.ackWait/10 + 200*time.Millisecond))
	if wait > 0 {
		s.log.Info("waiting for this member's own unsettled deliveries to time out", "partition", o.p, "wait", wait)
		select {
		case <-ctx.Done():
		case err := <-o.lost:
			return err
		case <-time.After(wait):
		}
	}
	s.mu.Lock()
	delete(s.dirty, o.p)
	s.mu.Unlock()
	return nil
}

// waitPrevious waits, after the previous owner's lease expired rather than being released,
// for that owner's deliveries to time out (waitInFlight), retrying the check until it
// succeeds. The lease is kept meanwhile: releasing it would let the next acquisition look
// like a graceful handoff and skip the wait. It returns an error only when the lease is lost.
func (o *ownership) waitPrevious(ctx context.Context) error {
	backoff := retry.Backoff{Min: o.s.to.Renew, Max: o.s.to.Renew}
	for {
		err := o.s.waitInFlight(ctx, o.p, o.lost)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		o.s.log.Warn("in-flight check failed, retrying", "partition", o.p, "err", err)
		select {
		case <-ctx.Done():
		case err := <-o.lost:
			return err
		case <-time.After(backoff.Next()):
		}
	}
}

// consume subscribes to p on the Bus and serves it until ctx ends, the lease is lost or the
// subscription ends by itself.
func (o *ownership) consume(ctx context.Context) error {
	s, p := o.s, o.p
	sub, err := s.c.SubscribePartition(s.subCtx, s.cfg.Topic, s.cfg.Group, p, s.h, s.opts...)
	if err != nil {
		o.release()
		s.setErr(err)
		s.log.Warn("subscribe failed", "partition", p, "err", err)
		return err
	}
	s.mu.Lock()
	s.owned[p] = o.lease
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.owned, p)
		s.mu.Unlock()
	}()
	s.log.Info("partition started", "partition", p, "previous", o.lease.Previous)

	select {
	case <-ctx.Done():
		o.handOff(sub)
		select {
		case err := <-o.lost:
			return o.fail(err)
		default:
		}
		s.flush()
		o.release()
		s.log.Info("partition handed off", "partition", p)
		return nil
	case err := <-o.lost:
		s.stopSub(p, sub)
		return o.fail(err)
	case <-sub.Done():
		o.release()
		err := sub.Err()
		if err == nil {
			err = fmt.Errorf("partition: subscription of partition %d ended: %w", p, jetbus.ErrClosed)
		}
		s.setErr(err)
		return err
	}
}

// handOff ends the subscription after ctx ended: a drain when the subscriber is draining
// (cut short if the lease is lost meanwhile), a stop otherwise. A lost lease seen during the
// drain is put back on lost for the caller.
func (o *ownership) handOff(sub jetbus.Subscription) {
	dctx := o.s.draining()
	if dctx == nil {
		o.s.stopSub(o.p, sub)
		return
	}
	dctx, cancel := context.WithCancel(dctx)
	defer cancel()
	go func() {
		select {
		case err := <-o.lost:
			o.lost <- err
			cancel()
		case <-dctx.Done():
		}
	}()
	_ = sub.Drain(dctx)
}

// stopSub stops a partition's subscription. When the connection is closed it does not wait
// longer than a renew interval for it: nothing can be settled any more, the lease expires and
// the next owner waits for the deliveries to time out.
func (s *Subscriber) stopSub(p int, sub jetbus.Subscription) {
	done := make(chan struct{})
	go func() {
		_ = sub.Stop()
		close(done)
	}()
	t := time.NewTicker(s.to.Renew)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if nc := s.js.Conn(); nc != nil && nc.IsClosed() {
				s.log.Warn("subscription did not stop after the connection closed; abandoning it", "partition", p)
				return
			}
		}
	}
}

// flush waits until the server has received everything sent on the connection so far, in
// particular the naks with which a stopped subscription returned its unstarted deliveries:
// they must reach the consumer before the next owner's first pull, or that pull gets later
// events first. (It helps when the Consumer publishes on the same connection as js.)
func (s *Subscriber) flush() {
	if nc := s.js.Conn(); nc != nil && !nc.IsClosed() {
		if err := nc.FlushTimeout(s.to.Renew); err != nil {
			s.log.Debug("flush failed", "err", err)
		}
	}
}

// waitInFlight waits, after a lease expired rather than being released, until the previous
// owner's deliveries of partition p are due for redelivery (its last delivery is older than
// the consumer's AckWait), so that the new owner sees them first and in order. It returns the
// keeper's error if the lease is lost meanwhile.
func (s *Subscriber) waitInFlight(ctx context.Context, p int, lost chan error) error {
	ictx, cancel := context.WithTimeout(ctx, s.to.LeaseTTL)
	cons, err := s.js.Consumer(ictx, jetbus.StreamName(s.cfg.Topic), jetbus.ConsumerName(s.cfg.Group, p))
	cancel()
	if errors.Is(err, natsjs.ErrConsumerNotFound) || ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("partition: consumer of partition %d: %w", p, retry.Opaque(err))
	}
	info := cons.CachedInfo()
	if info.NumAckPending == 0 {
		return nil
	}
	wait := info.Config.AckWait // no time of last delivery: assume it was just now
	if info.Delivered.Last != nil {
		wait -= info.TimeStamp.Sub(*info.Delivered.Last)
	}
	if wait <= 0 {
		return nil
	}
	wait += wait/10 + 200*time.Millisecond // let the server's redelivery timer fire
	s.log.Info("waiting for the previous owner's deliveries to time out", "partition", p, "wait", wait, "ack_pending", info.NumAckPending)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case err := <-lost:
		return err
	}
	return nil
}
