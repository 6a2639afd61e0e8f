package jetbus

import (
	"context"
	"time"
)

// Optional capabilities of a Bus. A Bus implements Bus; it may also implement the interfaces
// below, which callers find with a type assertion:
//
//	ps, ok := bus.(jetbus.PartitionSubscriber)
//
// Package jetstream's Bus implements every one of them: PartitionSubscriber, KeyReader and
// AsyncPublisher.

// PartitionSubscriber is the capability of consuming a single partition of a topic for a
// group, under a fence held outside the Bus. Package partition uses it to consume the
// partitions the group's assignment gives a member, each under its lease.
type PartitionSubscriber interface {
	// Partitions returns the topic's partition count.
	Partitions(ctx context.Context, topic string) (int, error)
	// SubscribePartition consumes partition p of topic as group, as Subscribe does for every
	// partition, through the same durable consumer ConsumerName(group, p). It takes the
	// partition at once from a client that still holds it (a crashed member whose hold has
	// not expired yet) and returns that client's unacknowledged deliveries to the consumer so
	// they come first, in order: call it only under a fence, such as package partition's
	// leases, that guarantees the previous holder stopped. Stop returns unstarted deliveries
	// to the server. FanIn is refused (ErrInvalidOption).
	SubscribePartition(ctx context.Context, topic, group string, p int, h Handler, opts ...SubscribeOption) (Subscription, error)
}

// AsyncPublisher is the capability of publishing without waiting for the server, so that a
// caller keeps many publishes in flight and learns each one's result later. Packages
// changefeed and ingress pipeline their publishes through it.
type AsyncPublisher interface {
	// PublishAsync publishes as Bus.Publish does but returns before the server stored the
	// event: the future's Wait gives the result. Validation and publish middlewares run
	// before it returns, so bad input fails here (with Publish's errors) and nothing is sent.
	// It blocks while the implementation's bound on outstanding publishes is reached. A
	// future that is never waited for still publishes.
	PublishAsync(ctx context.Context, topic string, payload any, opts ...PublishOption) (PublishFuture, error)
}

// PublishFuture is the pending result of AsyncPublisher.PublishAsync. Wait may be called from
// any goroutine, once at a time; Duplicate and the event's Seq are set once Wait succeeded.
type PublishFuture interface {
	// Wait waits until the server stored the event (and every extra message a publish
	// middleware published with it), or ctx ends, and returns the event.
	Wait(ctx context.Context) (*Event, error)
	// Duplicate reports, after Wait succeeded, whether the server had already stored an
	// event with this ID within the topic's duplicate window (a retried publish): it stored
	// nothing new, and the event's Seq is the stored one's.
	Duplicate() bool
	// Event returns the event being published (Seq is set once Wait succeeded).
	Event() *Event
}

// MaxLatestKeys bounds the keys of one KeyReader.Latest call.
const MaxLatestKeys = 1000

// KeyReader is the capability of reading a topic's events by key, without consuming it: the
// state of keys for a cold start or a lookup, and time travel. On a keyed topic (see package
// jetstream's TopicConfig.Keyed) the server answers from its per-key subjects directly; Fold
// also works on plain topics, by scanning.
type KeyReader interface {
	// Latest returns the last stored event of each key found, in one batched request, for
	// up to MaxLatestKeys keys (ErrInvalidOption beyond). Keys without events are absent
	// from the map. A tombstone is returned as such (Event.Tombstone). ErrNotKeyed on a
	// plain topic.
	Latest(ctx context.Context, topic string, keys ...string) (map[string]*Event, error)
	// At returns the last event of key stored at or before t (the stream's time, not the
	// event's TS), or ErrEventNotFound when there is none: t is before the key's first kept
	// event. After a tombstone it returns the tombstone. ErrNotKeyed on a plain topic.
	At(ctx context.Context, topic, key string, t time.Time) (*Event, error)
	// Versions returns the kept events of key, oldest first (KeepPerKey of them at most).
	// ErrNotKeyed on a plain topic.
	Versions(ctx context.Context, topic, key string) ([]*Event, error)
	// Fold calls fn with every event of key stored at or before until (zero: now), oldest
	// first, and stops at fn's first error, which it returns. FoldAfter starts after a
	// snapshot's sequence. On a keyed topic it reads only the key's events; on a plain topic
	// it scans the key's partition and skips other keys' events, so it costs a read of the
	// whole partition: use it for rare reconstructions, not for lookups.
	Fold(ctx context.Context, topic, key string, until time.Time, fn func(*Event) error, opts ...FoldOption) error
}

// FoldOption configures a KeyReader.Fold.
type FoldOption func(*FoldOptions)

// FoldOptions is the result of applying FoldOptions. Implementations read it.
type FoldOptions struct {
	// After is the stream sequence of a snapshot the caller already holds: only later events
	// are folded.
	After uint64
}

// ApplyFoldOptions applies opts in order (nil ones are skipped).
func ApplyFoldOptions(opts ...FoldOption) FoldOptions {
	var o FoldOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// FoldAfter folds only the events stored after sequence seq: the position of a snapshot the
// caller starts from.
func FoldAfter(seq uint64) FoldOption { return func(o *FoldOptions) { o.After = seq } }
