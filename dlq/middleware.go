package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// publishTimeout bounds one dead-letter publish.
const publishTimeout = 10 * time.Second

// Middleware returns the handler middleware that moves failed events to the DLQ. Install it
// first (outermost) so it sees the failures of every inner middleware:
//
//	jetstream.WithHandlerMiddleware(q.Middleware(), schemaRegistry.UpcastMiddleware())
//
// It dead-letters an event when the handler returns jetbus.Permanent, when it fails on its
// last attempt, when the body is not JSON (without calling the handler), and, with parking,
// when the event's key is parked in the group. It acknowledges, without calling the handler,
// a replayed event meant for another group: one that Replay recorded in ReplayBucket (no
// header decides this, so no publisher can make a group skip an event).
func (q *Queue) Middleware() jetbus.HandlerMiddleware {
	return func(next jetbus.Handler) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			replayFor, err := q.replayedFor(ctx, d.ID)
			if err != nil {
				return err // retried: whether it is a replay is unknown
			}
			if replayFor != "" && replayFor != d.Group {
				return nil
			}
			if q.cfg.Parking && d.Key != "" && replayFor == "" {
				parked, err := q.isParked(ctx, d.Group, d.Msg.Stream, d.Key)
				if err != nil {
					return err // retried: parking state unknown
				}
				if parked {
					return q.deadLetter(ctx, d, ReasonParked, fmt.Errorf("key %q has an earlier dead letter in group %s", d.Key, d.Group))
				}
			}
			if d.DecodeErr != nil {
				return q.deadLetter(ctx, d, ReasonDecode, d.DecodeErr)
			}
			err = next(ctx, d)
			if err == nil {
				return nil
			}
			var done *DeadLetteredError
			switch {
			case errors.As(err, &done):
				return err
			case jetbus.IsPermanent(err):
				return q.deadLetter(ctx, d, ReasonPermanent, err)
			case d.LastAttempt():
				return q.deadLetter(ctx, d, ReasonMaxAttempts, err)
			}
			return err
		}
	}
}

// deadLetter stores d in the DLQ and returns the Permanent error that makes the Bus terminate
// the original; or, if the DLQ did not take it, an ordinary error so the original is retried.
func (q *Queue) deadLetter(ctx context.Context, d *jetbus.Delivery, reason string, cause error) error {
	o := &origin{
		topic:    d.Topic,
		group:    d.Group,
		subject:  d.Msg.Subject,
		stream:   d.Msg.Stream,
		seq:      d.Msg.Seq,
		id:       d.ID,
		key:      d.Key,
		header:   nats.Header(d.Msg.Header),
		data:     d.Msg.Data,
		attempts: d.Attempt,
		reason:   reason,
		errMsg:   cause.Error(),
	}
	seq, err := q.store(ctx, o)
	if err != nil {
		return fmt.Errorf("%w (original kept for redelivery): %w", err, cause)
	}
	return jetbus.Permanent(&DeadLetteredError{Reason: reason, Seq: seq, Err: cause})
}

// store publishes o to the DLQ, waits for the acknowledgement and parks o's key when parking
// is on.
func (q *Queue) store(ctx context.Context, o *origin) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	ack, err := q.js.PublishMsg(ctx, o.msg(time.Now()))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDLQUnavailable, retry.Opaque(err))
	}
	if q.cfg.Parking && o.key != "" {
		if err := q.park(ctx, o.group, o.stream, o.key); err != nil {
			return 0, fmt.Errorf("dlq: park key %q: %w", o.key, retry.Opaque(err))
		}
	}
	if !ack.Duplicate {
		q.metrics.deadLetter(o.topic, o.group, o.reason)
		q.log.Warn("event dead-lettered", "topic", o.topic, "group", o.group, "reason", o.reason,
			"original_seq", o.seq, "dlq_seq", ack.Sequence, "err", o.errMsg)
	}
	return ack.Sequence, nil
}
