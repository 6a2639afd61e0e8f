package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// a replayed event meant for another group: one that Replay recorded in ReplayBucket, with
// the topic, key and body it published (no header decides this, and an event that reuses a
// replay's ID with other content is delivered to every group, so no publisher can make a
// group skip an event).
func (q *Queue) Middleware() jetbus.HandlerMiddleware {
	return func(next jetbus.Handler) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			replayFor, err := q.replayedFor(ctx, d)
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
	seq, err := q.DeadLetter(ctx, d, reason, cause)
	if err != nil {
		return fmt.Errorf("%w (original kept for redelivery): %w", err, cause)
	}
	return jetbus.Permanent(&DeadLetteredError{Reason: reason, Seq: seq, Err: cause})
}

// DeadLetter stores delivery d in the DLQ with reason and cause, as the middleware does for a
// failed handler (parking its key when parking is on), and returns the dead letter's
// sequence once the DLQ acknowledged it. The caller then settles the original (acknowledge or
// terminate it). It is for consumers that judge events outside a handler's result, like a
// projection whose bulk write refused one document (ReasonProjection). Errors wrap
// ErrDLQUnavailable: the original must then be kept for redelivery.
func (q *Queue) DeadLetter(ctx context.Context, d *jetbus.Delivery, reason string, cause error) (uint64, error) {
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
	return q.store(ctx, o)
}

// Rejected is a message refused before it reached its topic, by ingress or a changefeed, to be
// kept as a dead letter (Queue.Reject).
type Rejected struct {
	// Topic is the topic the message was meant for; "" (or an invalid name) files it under
	// UnroutedSubject.
	Topic string
	// Source is where it came from: the ingress subject ("in.orders"), or
	// "changefeed.<name>" for a change. Stored as x-dlq-original-subject.
	Source string
	// By is the component that refused it ("ingress", "changefeed-<name>"), stored as the
	// dead letter's group.
	By string
	// ID is the message's event ID when it had one: a refusal of the same message again (a
	// client's retry) is then stored once. Empty: a fresh ID.
	ID     string
	Key    string
	Header nats.Header
	Data   []byte
	// BodySize and BodySHA256, when BodySHA256 is set, say that Data is only the first bytes
	// of the message's body, cut by the caller (to fit the server's max payload): the whole
	// body's size and SHA-256 (hex). The letter is then marked truncated (HeaderBodySize,
	// HeaderBodySHA256) and cannot be replayed, as one Reject cut itself.
	BodySize   int
	BodySHA256 string
	// Reason is ReasonIngress or ReasonChangefeed; Err says why (ingress puts its error code
	// first).
	Reason string
	Err    error
	// Unlisted says Topic is none the rejecter serves (a subject a client invented, or a
	// topic not open to ingress): the letter is counted under the topic "_other", so that
	// clients cannot create metric series at will, and an ingress refusal is stored on
	// RejectsOtherSubject with its topic in HeaderTopic, so that they cannot create subjects
	// either. The letter's Topic is still its topic, and Filter.Topic finds it.
	Unlisted bool
}

// OtherTopic is the topic label of the dead letters of Rejected.Unlisted topics.
const OtherTopic = "_other"

// UnroutedSubject holds the dead letters of rejected messages without a valid topic;
// RejectsUnroutedSubject those ingress refused. RejectsOtherSubject holds ingress's refusals
// of valid topic names it does not serve (Rejected.Unlisted), each with its topic in
// HeaderTopic.
const (
	unrouted               = "_unrouted"
	UnroutedSubject        = SubjectPrefix + unrouted
	RejectsUnroutedSubject = RejectsSubjectPrefix + unrouted
	RejectsOtherSubject    = RejectsSubjectPrefix + OtherTopic
)

// Reject stores a refused message in the DLQ and returns the dead letter's sequence once the
// DLQ acknowledged it. A message ingress refused (ReasonIngress) goes to RejectsStreamName,
// within its own bounds (Config.Rejects), its body cut to Config.Rejects.MaxBody (with the
// whole body's size and SHA-256); others (a changefeed's) to StreamName, whole. Replaying it
// publishes it to its topic for every group: it never reached the topic, so no group has seen
// it.
func (q *Queue) Reject(ctx context.Context, r Rejected) (uint64, error) {
	id := r.ID
	if id == "" {
		id = rejectedID()
	}
	errMsg := ""
	if r.Err != nil {
		errMsg = r.Err.Error()
	}
	o := &origin{
		topic:    r.Topic,
		group:    r.By,
		subject:  r.Source,
		id:       id,
		key:      r.Key,
		header:   r.Header,
		data:     r.Data,
		attempts: 1,
		reason:   r.Reason,
		errMsg:   errMsg,
		rejected: true,
		refusal:  r.Reason == ReasonIngress,
		unlisted: r.Unlisted,
	}
	if r.BodySHA256 != "" { // cut by the caller already
		o.bodySize, o.bodySHA256 = r.BodySize, r.BodySHA256
	}
	if max := q.cfg.Rejects.MaxBody; o.refusal && max > 0 && len(o.data) > max {
		if o.bodySHA256 == "" {
			o.bodySize, o.bodySHA256 = len(o.data), bodySHA256(o.data)
		}
		o.data = o.data[:max]
	}
	return q.store(ctx, o)
}

// store publishes o to the DLQ, waits for the acknowledgement and parks o's key when parking
// is on. A refused message parks nothing: it never reached a group, and no delivery would
// ever wait behind it, so a flood of them with invented keys would only fill the bucket.
func (q *Queue) store(ctx context.Context, o *origin) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	ack, err := q.js.PublishMsg(ctx, o.msg(time.Now()))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDLQUnavailable, retry.Opaque(err))
	}
	if q.cfg.Parking && o.key != "" && !o.rejected {
		if err := q.park(ctx, o.group, o.stream, o.key); err != nil {
			return 0, fmt.Errorf("dlq: park key %q: %w", o.key, retry.Opaque(err))
		}
	}
	if !ack.Duplicate {
		label := o.topic
		if o.unlisted {
			label = OtherTopic
		}
		q.metrics.deadLetter(label, o.group, o.reason)
		// A refused message is a client's doing, maybe a flood of them: at warn at most every
		// 10 s, at debug otherwise. A handler's failure is logged each time.
		level := slog.LevelWarn
		if o.rejected {
			if now, last := time.Now().UnixNano(), q.rejLog.Load(); now-last < int64(10*time.Second) || !q.rejLog.CompareAndSwap(last, now) {
				level = slog.LevelDebug
			}
		}
		q.log.Log(ctx, level, "event dead-lettered", "topic", o.topic, "group", o.group, "reason", o.reason,
			"original_seq", o.seq, "dlq_seq", ack.Sequence, "err", o.errMsg)
	}
	return ack.Sequence, nil
}
