package jetstream

import (
	"context"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

type pendingKey struct{ topic, group, id string }

// pendingDelivery is a ManualAck delivery awaiting Ack or Nack.
type pendingDelivery struct {
	id      string
	msg     natsjs.Msg
	sub     *subscription
	pc      *partConsumer
	attempt int
}

// The pending deliveries of an event ID are a list, oldest first: an ID published again
// after the topic's duplicate window is stored twice (a producer's late retry, a replay), and
// both deliveries may be pending at once (a batch holds them both). Each settlement by ID
// (Ack, Nack, AckBatch) takes the oldest, so that as many settlements as deliveries settle
// them all; otherwise the one left would wait for its ack timeout, holding the partition's
// lag above zero meanwhile.

func (b *Bus) addPending(k pendingKey, p *pendingDelivery) {
	b.mu.Lock()
	b.pending[k] = append(b.pending[k], p)
	b.mu.Unlock()
}

// takePending removes the pending delivery of k that is msg (the oldest when msg is nil)
// and reports whether it did.
func (b *Bus) takePending(k pendingKey, msg natsjs.Msg) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.pending[k] {
		if msg == nil || p.msg == msg {
			b.removePending(k, i)
			return true
		}
	}
	return false
}

// takeOldest removes the oldest pending delivery of k and returns it; b.mu is held.
func (b *Bus) takeOldest(k pendingKey) (*pendingDelivery, bool) {
	ps := b.pending[k]
	if len(ps) == 0 {
		return nil, false
	}
	p := ps[0]
	b.removePending(k, 0)
	return p, true
}

// removePending removes the i-th pending delivery of k; b.mu is held.
func (b *Bus) removePending(k pendingKey, i int) {
	ps := b.pending[k]
	if len(ps) == 1 {
		delete(b.pending, k)
		return
	}
	b.pending[k] = slices.Delete(ps, i, i+1)
}

func (b *Bus) lookupPending(ctx context.Context, topic, group, id string) (*pendingDelivery, error) {
	if _, err := b.checkNames(ctx, topic, group); err != nil {
		return nil, err
	}
	b.mu.Lock()
	p, ok := b.takeOldest(pendingKey{topic, group, id})
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s in %s/%s", jetbus.ErrUnknownEvent, id, topic, group)
	}
	return p, nil
}

// dropPending returns to the server the undecided ManualAck deliveries of a stopped
// subscription (see also release, which resets instead where it can).
func (b *Bus) dropPending(s *subscription) { nakAll(b.takePendingOf(s, nil)) }

// takePendingOf removes the undecided ManualAck deliveries of subscription s's partition
// consumer pc (all of its partitions when pc is nil) and returns them.
func (b *Bus) takePendingOf(s *subscription, pc *partConsumer) []*pendingDelivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*pendingDelivery
	for k, ps := range b.pending {
		kept := ps[:0]
		for _, p := range ps {
			if p.sub == s && (pc == nil || p.pc == pc) {
				out = append(out, p)
			} else {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			delete(b.pending, k)
		} else {
			b.pending[k] = kept
		}
	}
	return out
}

// nakAll returns deliveries to the server.
func nakAll(ps []*pendingDelivery) {
	for _, p := range ps {
		p.pc.naked.Store(true)
		_ = p.msg.Nak()
		p.pc.gm.settle(false)
	}
}

// hasPending reports whether a ManualAck delivery of pc awaits Bus.Ack or Bus.Nack.
func (b *Bus) hasPending(pc *partConsumer) bool {
	if !pc.sub.opts.ManualAck {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ps := range b.pending {
		for _, p := range ps {
			if p.pc == pc {
				return true
			}
		}
	}
	return false
}

// Ack implements jetbus.Bus for ManualAck subscriptions: it waits for the server to confirm
// the acknowledgement.
func (b *Bus) Ack(ctx context.Context, topic, group, id string) error {
	p, err := b.lookupPending(ctx, topic, group, id)
	if err != nil {
		return err
	}
	p.pc.gm.settle(true)
	if err := p.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("jetbus: ack %s: %w", id, retry.Opaque(err))
	}
	return nil
}

// Nack implements jetbus.Bus for ManualAck subscriptions: the event is delivered again after
// the subscription's backoff, or, on its last attempt, left to the server's MaxDeliver.
func (b *Bus) Nack(ctx context.Context, topic, group, id string) error {
	p, err := b.lookupPending(ctx, topic, group, id)
	if err != nil {
		return err
	}
	p.pc.gm.settle(false)
	p.pc.naked.Store(true)
	if p.attempt < p.sub.opts.MaxAttempts {
		err = p.msg.NakWithDelay(p.sub.opts.Backoff(p.attempt))
	} else {
		err = p.msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("jetbus: nack %s: %w", id, retry.Opaque(err))
	}
	return nil
}

// AckBatch acknowledges pending ManualAck deliveries of the group without waiting for the
// server's confirmation of each: the acks are sent, then one flush makes sure the server has
// received them all before it returns. It is for consumers that settle events in batches (a
// projection's bulk write); an ack lost in a failure means a redelivery, never a loss. IDs
// with no pending delivery are reported in an error wrapping jetbus.ErrUnknownEvent; the others
// are acknowledged nonetheless.
func (b *Bus) AckBatch(ctx context.Context, topic, group string, ids ...string) error {
	ps, unknown, err := b.takeAll(ctx, topic, group, ids)
	if err != nil {
		return err
	}
	var failed error
	for _, p := range ps {
		p.pc.gm.settle(true)
		if err := p.msg.Ack(); err != nil && failed == nil {
			failed = fmt.Errorf("jetbus: ack %s: %w", p.id, retry.Opaque(err))
		}
	}
	if failed == nil && len(ps) > 0 {
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		if err := b.nc.FlushWithContext(fctx); err != nil {
			failed = fmt.Errorf("jetbus: ack batch: %w", retry.Opaque(err))
		}
	}
	if failed != nil {
		return failed
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: %d of %d in %s/%s, first %s", jetbus.ErrUnknownEvent, len(unknown), len(ids), topic, group, unknown[0])
	}
	return nil
}

// InProgress tells the server that pending ManualAck deliveries of the group are still being
// worked on, so their ack timeout starts again (e.g. while a batch's write is retried): every
// pending delivery of each ID. The deliveries stay pending.
func (b *Bus) InProgress(ctx context.Context, topic, group string, ids ...string) error {
	if _, err := b.checkNames(ctx, topic, group); err != nil {
		return err
	}
	b.mu.Lock()
	var ms []natsjs.Msg
	var unknown []string
	for _, id := range ids {
		ps := b.pending[pendingKey{topic, group, id}]
		for _, p := range ps {
			ms = append(ms, p.msg)
		}
		if len(ps) == 0 {
			unknown = append(unknown, id)
		}
	}
	b.mu.Unlock()
	for _, m := range ms {
		if err := m.InProgress(); err != nil {
			return fmt.Errorf("jetbus: in progress: %w", retry.Opaque(err))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: %d of %d in %s/%s, first %s", jetbus.ErrUnknownEvent, len(unknown), len(ids), topic, group, unknown[0])
	}
	return nil
}

// flushTimeout bounds the round trip that confirms the server received a batch of acks.
const flushTimeout = 10 * time.Second

// takeAll removes a pending delivery of each of ids (the oldest of its ID: an ID given twice
// takes two) and returns them, with the IDs that had none.
func (b *Bus) takeAll(ctx context.Context, topic, group string, ids []string) ([]*pendingDelivery, []string, error) {
	if _, err := b.checkNames(ctx, topic, group); err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := make([]*pendingDelivery, 0, len(ids))
	var unknown []string
	for _, id := range ids {
		p, ok := b.takeOldest(pendingKey{topic, group, id})
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		ps = append(ps, p)
	}
	return ps, unknown, nil
}
