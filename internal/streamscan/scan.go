// Package streamscan reads a stream once, in order, for the packages that look for messages
// by content: jetstream (a position given as an event ID) and dlq (listing dead letters).
package streamscan

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/internal/retry"
)

// JetStream is what a scan needs of a JetStream context: natsjs.JetStream has it.
type JetStream interface {
	OrderedConsumer(ctx context.Context, stream string, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error)
}

// batch and batchBytes bound one fetch of a scan: what a scan holds at once, whatever the
// size of the messages. A message larger than batchBytes is fetched alone.
const batch = 500

var batchBytes = 2 << 20 // a variable for the tests

// Scan reads stream with an ordered consumer configured by cfg and calls fn with every
// message, in order, until fn returns false or the messages the stream held when the scan
// started are read. It returns ctx's error if ctx ended first. It holds one fetch at a time:
// at most 500 messages and 2 MiB of them (or one larger message). If the server delivers
// nothing more, even one message alone, while the stream still holds messages for the scan,
// Scan returns an error wrapping ErrIncomplete: a scan ends early only with an error.
func Scan(ctx context.Context, js JetStream, stream string, cfg natsjs.OrderedConsumerConfig, fn func(natsjs.Msg, *natsjs.MsgMetadata) bool) error {
	c, err := orderedConsumer(ctx, js, stream, cfg)
	if err != nil {
		return fmt.Errorf("scan %s: %w", stream, err)
	}
	pending := c.CachedInfo().NumPending
	alone := false      // fetch one message, however large
	emptyAlone := false // a fetch of one message came back empty while messages were pending
	for pending > 0 && ctx.Err() == nil {
		n, done := 0, false
		// A fetch that fails before delivering anything (no responders while a cluster
		// elects the consumer's leader) is asked again; the ordered consumer resumes after
		// the last message it delivered.
		err := retry.Do(ctx, fetchPolicy, func(context.Context) error {
			n = 0
			size, opts := 1, []natsjs.FetchOpt{natsjs.FetchMaxWait(5 * time.Second)}
			if !alone {
				size, opts = int(min(pending, batch)), append(opts, natsjs.FetchMaxBytes(batchBytes))
			}
			msgs, err := c.Fetch(size, opts...)
			if err != nil {
				return err
			}
			for m := range msgs.Messages() {
				n++
				meta, err := m.Metadata()
				if err != nil {
					continue
				}
				pending = meta.NumPending
				if !fn(m, meta) {
					done = true
					return nil
				}
			}
			if err := msgs.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) && n == 0 {
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("scan %s: %w", stream, err)
		}
		if done {
			return nil
		}
		if n > 0 {
			alone, emptyAlone = false, false
			continue
		}
		if !alone {
			// Nothing came: the next message may be larger than batchBytes (the server
			// answers such a fetch with none). Fetch it alone. How long the fetch took says
			// nothing: the ordered consumer is created again for every fetch, which alone can
			// take seconds on a busy cluster.
			alone = true
			continue
		}
		// Not even one message came. The count of pending messages may be out of date
		// (messages removed ahead of the scan, aged out or deleted): ask the server.
		if ctx.Err() != nil {
			break
		}
		var info *natsjs.ConsumerInfo
		err = retry.Do(ctx, fetchPolicy, func(ctx context.Context) error {
			var err error
			info, err = c.Info(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("scan %s: %d messages pending, none delivered: %w", stream, pending, err)
		}
		if info.NumPending == 0 {
			break
		}
		if emptyAlone {
			// Twice: end with an error, never as if the stream were read to its end.
			return fmt.Errorf("scan %s: %w: %d messages pending, none delivered", stream, ErrIncomplete, info.NumPending)
		}
		emptyAlone, pending = true, info.NumPending
	}
	return ctx.Err()
}

// ErrIncomplete: the server delivered nothing more while the stream still held messages for
// the scan. The scan ends with it rather than pass for complete.
var ErrIncomplete = errors.New("the server stopped delivering messages before the end")

// orderedConsumer creates the scan's consumer, asking again while a cluster has no one to
// answer yet (a stream leader being elected): the request is idempotent.
func orderedConsumer(ctx context.Context, js JetStream, stream string, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error) {
	var c natsjs.Consumer
	err := retry.Do(ctx, createPolicy, func(ctx context.Context) error {
		var err error
		c, err = js.OrderedConsumer(ctx, stream, cfg)
		return err
	})
	return c, err
}

var (
	createPolicy = retry.Policy{Try: 5 * time.Second, Attempts: 8, Backoff: retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}}
	fetchPolicy  = retry.Policy{Attempts: 8, Backoff: retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}}
)
