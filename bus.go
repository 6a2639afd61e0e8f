package jetbus

import (
	"context"
	"time"
)

// Bus is the event bus contract. Implementations: package jetstream.
//
// All methods are safe for concurrent use.
type Bus interface {
	// Publish writes payload to topic and returns the event as written (ID, TS, partition,
	// stream sequence). payload is marshaled with encoding/json; a json.RawMessage is taken
	// as is after a validity check; nil is a tombstone (JSON null). It returns when the
	// server has stored the event.
	Publish(ctx context.Context, topic string, payload any, opts ...PublishOption) (*Event, error)
	// Subscribe consumes topic (and the FanIn topics) as the durable group and calls h for
	// every event until ctx is done or the Subscription is stopped.
	Subscribe(ctx context.Context, topic, group string, h Handler, opts ...SubscribeOption) (Subscription, error)
	// Ack acknowledges a delivery of a ManualAck subscription. An ID stored twice in the topic
	// (published again after the duplicate window) may have two deliveries pending: each
	// Ack or Nack of the ID settles the oldest.
	Ack(ctx context.Context, topic, group, id string) error
	// Nack rejects a delivery of a ManualAck subscription: it is delivered again after the
	// subscription's backoff, or dead-lettered if it was the last attempt.
	Nack(ctx context.Context, topic, group, id string) error
	// Cursor returns the group's position in topic.
	Cursor(ctx context.Context, topic, group string) (*Cursor, error)
	// SetCursor moves the group's position in topic, for every partition, e.g. to
	// Earliest() to rebuild a view. Running members of the group continue from the new
	// position.
	SetCursor(ctx context.Context, topic, group string, to Position) error
}

// Handler processes one delivery. See the package doc for what its result means.
type Handler func(ctx context.Context, d *Delivery) error

// Delivery is one delivery of an event to a group.
type Delivery struct {
	*Event
	// Group is the consumer group the event is delivered to.
	Group string
	// Attempt counts deliveries of this event to the group, starting at 1.
	Attempt int
	// MaxAttempts is the subscription's MaxAttempts.
	MaxAttempts int
	// Msg is the message as it came off the wire, for middlewares that must copy it
	// faithfully (dead letters). Handlers use Event.
	Msg RawMessage
	// DecodeErr is set when the body is not valid JSON (it wraps ErrDecode). Middlewares
	// pass such a delivery on untouched; the Bus never calls the handler with it.
	DecodeErr error
}

// LastAttempt reports whether a failure of this delivery is final.
func (d *Delivery) LastAttempt() bool { return d.Attempt >= d.MaxAttempts }

// RawMessage is a delivered message as stored in the stream.
type RawMessage struct {
	Subject string
	Stream  string
	Seq     uint64
	Header  map[string][]string
	Data    []byte
	// Time is the time the stream stored the message.
	Time time.Time
}

// Subscription is a running subscription.
type Subscription interface {
	// Stop stops fetching, waits for the handlers that are running to return and settles
	// their results, and returns the events that were fetched but not started to the server
	// so another member can take them at once. It is idempotent.
	Stop() error
	// Drain stops fetching, handles every event already fetched, then stops. ctx bounds the
	// wait; when it is done, Drain behaves as Stop.
	Drain(ctx context.Context) error
	// Done is closed when the subscription has stopped.
	Done() <-chan struct{}
	// Err returns the error that stopped the subscription, if it stopped by itself.
	Err() error
}

// Cursor is a group's position in a topic, one entry per partition.
type Cursor struct {
	Topic      string
	Group      string
	Partitions []PartitionCursor
}

// PartitionCursor is a group's position in one partition, in stream sequences.
type PartitionCursor struct {
	Partition int
	// AckFloor is the stream sequence up to which every event of the partition has been
	// acknowledged (0: none). Events the server gave up on (MaxDeliver, then the dead-letter
	// queue) hold it back until an acknowledgement leaves nothing of the partition awaiting
	// one: Lag, not AckFloor, tells whether the group finished the partition.
	AckFloor uint64
	// Delivered is the stream sequence of the last event delivered (0: none).
	Delivered uint64
	// Pending counts events of the partition not delivered yet.
	Pending uint64
	// AckPending counts events delivered but not acknowledged yet.
	AckPending int
	// Oldest is the store time of the oldest event of the partition not yet acknowledged:
	// the first after AckFloor (zero when the group has finished every event).
	Oldest time.Time
}

// LagSeconds returns how far behind the partition is in time: now minus Oldest, 0 when the
// group has finished every event of the partition.
func (p PartitionCursor) LagSeconds(now time.Time) float64 {
	if p.Oldest.IsZero() || p.Pending+uint64(p.AckPending) == 0 {
		return 0
	}
	return max(0, now.Sub(p.Oldest).Seconds())
}

// Lag returns the number of events of the topic the group has not finished: not yet delivered
// plus delivered and not acknowledged.
func (c *Cursor) Lag() uint64 {
	var n uint64
	for _, p := range c.Partitions {
		n += p.Pending + uint64(p.AckPending)
	}
	return n
}

// PositionKind says where a Position starts.
type PositionKind int

// Position kinds.
const (
	PositionLatest PositionKind = iota
	PositionEarliest
	PositionTime
	PositionAfterSeq
	PositionAfterID
)

// Position is a place in a topic to start consuming from.
type Position struct {
	Kind PositionKind
	Time time.Time // PositionTime: the first event stored at or after Time
	Seq  uint64    // PositionAfterSeq: the first event after stream sequence Seq
	ID   string    // PositionAfterID: the first event after the event with this ID
}

// Earliest is the start of the topic.
func Earliest() Position { return Position{Kind: PositionEarliest} }

// Latest is the end of the topic: only events published from now on.
func Latest() Position { return Position{Kind: PositionLatest} }

// AtTime starts with the first event stored at or after t.
func AtTime(t time.Time) Position { return Position{Kind: PositionTime, Time: t} }

// AfterSequence starts after stream sequence seq.
func AfterSequence(seq uint64) Position { return Position{Kind: PositionAfterSeq, Seq: seq} }

// AfterEvent starts after the event with the given ID.
func AfterEvent(id string) Position { return Position{Kind: PositionAfterID, ID: id} }

// PublishFunc is the publish path that middlewares wrap. e is complete (ID, TS, key, payload,
// headers) except for Partition and Seq, which the innermost step sets.
type PublishFunc func(ctx context.Context, e *Event) error

// PublishMiddleware wraps the publish path, e.g. to validate or stamp headers.
type PublishMiddleware func(PublishFunc) PublishFunc

// HandlerMiddleware wraps a handler, e.g. to upcast, validate, dead-letter or measure.
type HandlerMiddleware func(Handler) Handler

// ChainHandler applies middlewares to h; the first middleware is the outermost.
func ChainHandler(h Handler, mws ...HandlerMiddleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ChainPublish applies middlewares to p; the first middleware is the outermost.
func ChainPublish(p PublishFunc, mws ...PublishMiddleware) PublishFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		p = mws[i](p)
	}
	return p
}
