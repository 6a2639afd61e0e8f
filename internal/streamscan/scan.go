// Package streamscan reads a stream once, in order, for the packages that look for messages
// by content: jetstream (a position given as an event ID) and dlq (listing dead letters).
package streamscan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// batch bounds one fetch of a scan.
const batch = 500

// Scan reads stream with an ordered consumer configured by cfg and calls fn with every
// message, in order, until fn returns false or the messages the stream held when the scan
// started are read. It returns ctx's error if ctx ended first.
func Scan(ctx context.Context, js natsjs.JetStream, stream string, cfg natsjs.OrderedConsumerConfig, fn func(natsjs.Msg, *natsjs.MsgMetadata) bool) error {
	c, err := orderedConsumer(ctx, js, stream, cfg)
	if err != nil {
		return fmt.Errorf("scan %s: %w", stream, err)
	}
	pending := c.CachedInfo().NumPending
	for pending > 0 && ctx.Err() == nil {
		msgs, err := c.Fetch(int(min(pending, batch)), natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("scan %s: %w", stream, err)
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = meta.NumPending
			if !fn(m, meta) {
				return nil
			}
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return fmt.Errorf("scan %s: %w", stream, err)
		}
		if n == 0 {
			break
		}
	}
	return ctx.Err()
}

// orderedConsumer creates the scan's consumer, asking again while a cluster has no one to
// answer yet (a stream leader being elected): the request is idempotent.
func orderedConsumer(ctx context.Context, js natsjs.JetStream, stream string, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error) {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := js.OrderedConsumer(tctx, stream, cfg)
		cancel()
		transient := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, context.DeadlineExceeded)
		if err == nil || !transient || attempt == 8 || ctx.Err() != nil {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
