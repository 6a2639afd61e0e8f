package jetstream

import (
	"context"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

type pendingKey struct{ topic, group, id string }

// pendingDelivery is a ManualAck delivery awaiting Ack or Nack.
type pendingDelivery struct {
	msg     natsjs.Msg
	sub     *subscription
	pc      *partConsumer
	attempt int
}

func (b *Bus) addPending(k pendingKey, p *pendingDelivery) {
	b.mu.Lock()
	b.pending[k] = p
	b.mu.Unlock()
}

// takePending removes the pending delivery of k if it is still msg (or any msg when msg is
// nil) and reports whether it did.
func (b *Bus) takePending(k pendingKey, msg natsjs.Msg) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pending[k]
	if !ok || (msg != nil && p.msg != msg) {
		return false
	}
	delete(b.pending, k)
	return true
}

func (b *Bus) lookupPending(ctx context.Context, topic, group, id string) (*pendingDelivery, error) {
	if _, err := b.checkNames(ctx, topic, group); err != nil {
		return nil, err
	}
	k := pendingKey{topic, group, id}
	b.mu.Lock()
	p, ok := b.pending[k]
	delete(b.pending, k)
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s in %s/%s", jetbus.ErrUnknownEvent, id, topic, group)
	}
	return p, nil
}

// dropPending returns the undecided deliveries of a stopped subscription to the server.
func (b *Bus) dropPending(s *subscription) {
	b.mu.Lock()
	var drop []*pendingDelivery
	for k, p := range b.pending {
		if p.sub == s {
			drop = append(drop, p)
			delete(b.pending, k)
		}
	}
	b.mu.Unlock()
	for _, p := range drop {
		_ = p.msg.Nak()
		p.pc.gm.settle(false)
	}
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
