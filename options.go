package jetbus

import (
	"fmt"
	"maps"
	"strings"
	"time"
)

// PublishOption configures one Publish.
type PublishOption func(*PublishOptions) error

// PublishOptions is the result of applying PublishOptions. Implementations read it.
type PublishOptions struct {
	ID       string
	TS       time.Time
	Key      string
	Headers  map[string]string
	Tags     []string
	CausedBy []string
	SID      string
	// TraceParent, TraceState and Baggage are the trace context set by WithTraceContext and
	// WithBaggage, as given: the Bus validates them (a malformed value is dropped and
	// counted, not an error).
	TraceParent string
	TraceState  string
	Baggage     string
}

// ApplyPublishOptions applies opts in order and validates the result.
func ApplyPublishOptions(opts ...PublishOption) (PublishOptions, error) {
	var o PublishOptions
	if len(opts) == 0 {
		return o, nil // the common case; taking o's address below would move it to the heap
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if err := ValidateKey(o.Key); err != nil {
		return o, err
	}
	for name, v := range o.Headers {
		if err := ValidateHeaderName(name); err != nil {
			return o, err
		}
		if err := ValidateHeaderValue(name, v); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithKey sets the event's key: it picks the partition and orders the events of the key. A
// key is at most MaxKeyLength bytes without control characters (ErrInvalidKey).
func WithKey(key string) PublishOption {
	return func(o *PublishOptions) error { o.Key = key; return nil }
}

// WithID sets the event ID instead of a fresh UUIDv7. Publishing the same ID twice within the
// topic's duplicate window stores the event once. An ID holds no control characters, and
// does not start with a prefix jetbus derives IDs from (ReservedIDPrefixes:
// ErrReservedHeader), so that no publisher can pass an event off as a DLQ replay.
func WithID(id string) PublishOption {
	return func(o *PublishOptions) error {
		if p, ok := ReservedID(id); ok {
			return fmt.Errorf("%w: event ID %q starts with %q, which jetbus derives its own IDs from", ErrReservedHeader, id, p)
		}
		return WithDerivedID(id)(o)
	}
}

// WithDerivedID sets an event ID that jetbus derived itself, reserved prefix included (a DLQ
// replay's "replay:…"). Only jetbus's own components use it: never pass it a value a client
// sent (use WithID).
func WithDerivedID(id string) PublishOption {
	return func(o *PublishOptions) error {
		if id == "" || controlChar(id) >= 0 {
			return fmt.Errorf("%w: event ID %q is empty or holds a control character", ErrInvalidOption, id)
		}
		o.ID = id
		return nil
	}
}

// ReservedIDPrefixes are the prefixes of the event IDs jetbus derives itself: a DLQ replay's
// (replay:<stream>:<seq>:<group>) and a dead letter's (dlq:…). WithID and ingress refuse
// them.
var ReservedIDPrefixes = []string{"replay:", "dlq:"}

// ReservedID reports whether id starts with one of ReservedIDPrefixes, and which.
func ReservedID(id string) (prefix string, reserved bool) {
	for _, p := range ReservedIDPrefixes {
		if strings.HasPrefix(id, p) {
			return p, true
		}
	}
	return "", false
}

// WithTS sets the event time instead of now.
func WithTS(ts time.Time) PublishOption {
	return func(o *PublishOptions) error { o.TS = ts; return nil }
}

// WithHeaders adds custom headers; names must match "x-[a-z0-9-]+" and not use a reserved
// prefix, values must hold no control characters (ErrInvalidHeader, ErrReservedHeader).
func WithHeaders(h map[string]string) PublishOption {
	return func(o *PublishOptions) error {
		if o.Headers == nil {
			o.Headers = make(map[string]string, len(h))
		}
		maps.Copy(o.Headers, h)
		return nil
	}
}

// WithTags adds tags to the event.
func WithTags(tags ...string) PublishOption {
	return func(o *PublishOptions) error {
		for _, t := range tags {
			if t == "" || strings.ContainsRune(t, ',') || controlChar(t) >= 0 {
				return fmt.Errorf("%w: tag %q is empty or holds a comma or a control character", ErrInvalidOption, t)
			}
		}
		o.Tags = append(o.Tags, tags...)
		return nil
	}
}

// WithCausedBy links the event to the events that caused it.
func WithCausedBy(ids ...string) PublishOption {
	return func(o *PublishOptions) error {
		for _, id := range ids {
			if id == "" || strings.ContainsRune(id, ',') || controlChar(id) >= 0 {
				return fmt.Errorf("%w: caused-by ID %q is empty or holds a comma or a control character", ErrInvalidOption, id)
			}
		}
		o.CausedBy = append(o.CausedBy, ids...)
		return nil
	}
}

// WithSID sets the producer's session ID; it holds no control characters (ErrInvalidOption).
func WithSID(sid string) PublishOption {
	return func(o *PublishOptions) error {
		if i := controlChar(sid); i >= 0 {
			return fmt.Errorf("%w: SID holds the control character %q at byte %d", ErrInvalidOption, sid[i], i)
		}
		o.SID = sid
		return nil
	}
}

// WithTraceContext sets the W3C trace context the event continues, as received from another
// hop (a message's traceparent and tracestate headers): when ctx holds no span, the event's
// span (with a tracing Bus) is a child of traceparent, or the event carries these values as
// they are (without one). When ctx holds a span, that span is the parent and these are
// ignored. A malformed traceparent is dropped with its tracestate, and a malformed
// tracestate alone, and counted by the Bus: never an error for the event.
func WithTraceContext(traceparent, tracestate string) PublishOption {
	return func(o *PublishOptions) error { o.TraceParent, o.TraceState = traceparent, tracestate; return nil }
}

// WithBaggage sets the W3C baggage header the event carries, instead of the baggage of ctx.
// The Bus keeps only the keys it allows (jetstream.WithBaggageKeys; none by default); a
// malformed baggage is dropped and counted, never an error.
func WithBaggage(baggage string) PublishOption {
	return func(o *PublishOptions) error { o.Baggage = baggage; return nil }
}

// Subscription defaults.
const (
	DefaultBatchSize   = 100
	DefaultMaxInFlight = 1000
	DefaultAckTimeout  = 30 * time.Second
	DefaultMaxAttempts = 5
)

// BackoffFunc returns the delay before delivery attempt+1 after attempt failed (attempt ≥ 1).
type BackoffFunc func(attempt int) time.Duration

// ExponentialBackoff doubles from base up to max: base, 2·base, 4·base, … ≤ max.
func ExponentialBackoff(base, max time.Duration) BackoffFunc {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < max; i++ {
			d *= 2
		}
		return min(d, max)
	}
}

// DefaultBackoff is the backoff when none is set: 1s doubling up to 30s.
var DefaultBackoff = ExponentialBackoff(time.Second, 30*time.Second)

// SubscribeOption configures a subscription.
type SubscribeOption func(*SubscribeOptions) error

// SubscribeOptions is the result of applying SubscribeOptions. Implementations read it.
type SubscribeOptions struct {
	From        Position
	BatchSize   int
	MaxInFlight int
	AckTimeout  time.Duration
	MaxAttempts int
	Backoff     BackoffFunc
	Filter      func(*Event) bool
	ManualAck   bool
	// FanIn lists more topics consumed by the same handler and group.
	FanIn []string
	// Middlewares wrap the handler of this subscription, inside the Bus's own.
	Middlewares []HandlerMiddleware
	// KeyConcurrency, when above 1, handles up to that many keys of a partition at once
	// (with Unordered: that many events, whatever their keys).
	KeyConcurrency int
	// Unordered makes the group one without per-key order: its consumers are not pinned,
	// and every subscriber of the group pulls every partition (see Unordered).
	Unordered bool
}

// ApplySubscribeOptions applies opts over the defaults and validates the result.
func ApplySubscribeOptions(opts ...SubscribeOption) (SubscribeOptions, error) {
	o := SubscribeOptions{
		From:        Latest(),
		BatchSize:   DefaultBatchSize,
		MaxInFlight: DefaultMaxInFlight,
		AckTimeout:  DefaultAckTimeout,
		MaxAttempts: DefaultMaxAttempts,
		Backoff:     DefaultBackoff,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	for _, t := range o.FanIn {
		if err := ValidateTopic(t); err != nil {
			return o, err
		}
	}
	if o.KeyConcurrency > 1 && o.ManualAck && !o.Unordered {
		return o, fmt.Errorf("%w: KeyConcurrency retries in place and cannot be combined with ManualAck", ErrInvalidOption)
	}
	return o, nil
}

// From sets where a group that has no position yet starts. A group that exists keeps its
// position; move it with Bus.SetCursor. The default is Latest().
func From(p Position) SubscribeOption {
	return func(o *SubscribeOptions) error {
		if p.Kind == PositionAfterID && p.ID == "" {
			return fmt.Errorf("%w: empty event ID", ErrInvalidOption)
		}
		o.From = p
		return nil
	}
}

// FromEarliest starts a new group at the start of the topic.
func FromEarliest() SubscribeOption { return From(Earliest()) }

// FromLatest starts a new group at the end of the topic (the default).
func FromLatest() SubscribeOption { return From(Latest()) }

// FromTime starts a new group at the first event stored at or after t.
func FromTime(t time.Time) SubscribeOption { return From(AtTime(t)) }

// AfterID starts a new group after the event with the given ID.
func AfterID(id string) SubscribeOption { return From(AfterEvent(id)) }

// AfterSeq starts a new group after the given stream sequence.
func AfterSeq(seq uint64) SubscribeOption { return From(AfterSequence(seq)) }

func positive(name string, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidOption, name, n)
	}
	return nil
}

// BatchSize sets how many events the first pull of a partition asks for (default 100). The
// Bus then sizes its pulls to the handler's measured speed, between 1 and MaxInFlight, so
// that the events it buffers are handled within a quarter of AckTimeout.
func BatchSize(n int) SubscribeOption {
	return func(o *SubscribeOptions) error { o.BatchSize = n; return positive("BatchSize", n) }
}

// MaxInFlight bounds the events delivered and not yet acknowledged, per partition consumer
// (default 1000).
func MaxInFlight(n int) SubscribeOption {
	return func(o *SubscribeOptions) error { o.MaxInFlight = n; return positive("MaxInFlight", n) }
}

// AckTimeout is how long a delivery may stay unacknowledged before the server delivers it
// again (default 30s). A handler that runs longer than this sees its event twice.
func AckTimeout(d time.Duration) SubscribeOption {
	return func(o *SubscribeOptions) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: AckTimeout must be at least 1ms, got %s", ErrInvalidOption, d)
		}
		o.AckTimeout = d
		return nil
	}
}

// MaxAttempts bounds deliveries of one event (default 5); then it is dead-lettered.
func MaxAttempts(n int) SubscribeOption {
	return func(o *SubscribeOptions) error { o.MaxAttempts = n; return positive("MaxAttempts", n) }
}

// Backoff sets the delay before redelivering a failed event (default DefaultBackoff).
func Backoff(f BackoffFunc) SubscribeOption {
	return func(o *SubscribeOptions) error {
		if f == nil {
			return fmt.Errorf("%w: nil Backoff", ErrInvalidOption)
		}
		o.Backoff = f
		return nil
	}
}

// Filter skips events for which f returns false: they are acknowledged without calling the
// handler.
func Filter(f func(*Event) bool) SubscribeOption {
	return func(o *SubscribeOptions) error { o.Filter = f; return nil }
}

// ManualAck leaves acknowledgement to Bus.Ack and Bus.Nack: a handler returning nil does not
// acknowledge. A handler error still retries or dead-letters as usual.
func ManualAck() SubscribeOption {
	return func(o *SubscribeOptions) error { o.ManualAck = true; return nil }
}

// FanIn also consumes the given topics, with the same group and handler.
func FanIn(topics ...string) SubscribeOption {
	return func(o *SubscribeOptions) error { o.FanIn = append(o.FanIn, topics...); return nil }
}

// Use wraps this subscription's handler with middlewares (the first is the outermost).
func Use(mws ...HandlerMiddleware) SubscribeOption {
	return func(o *SubscribeOptions) error { o.Middlewares = append(o.Middlewares, mws...); return nil }
}

// KeyConcurrency handles up to n events of a partition at once, never two of the same key:
// events are spread over n workers by key (events without a key by arrival), and each worker
// handles its events in stream order. A failed event is retried in place, after its backoff,
// before the next event of its key, so per-key order holds across retries; the ack deadline is
// extended meanwhile. An event that exhausts MaxAttempts without being dead-lettered is
// returned to the server like in the default mode. n ≤ 1 is the default: one event at a time
// per partition, retries through the server. It cannot be combined with ManualAck.
//
// With Unordered, keys are ignored: up to n events of a partition are handled at once, any
// events, and a failed event is retried through the server as in the default mode (there is
// no order to keep), so it can be combined with ManualAck.
func KeyConcurrency(n int) SubscribeOption {
	return func(o *SubscribeOptions) error {
		if n < 0 {
			return fmt.Errorf("%w: KeyConcurrency must not be negative, got %d", ErrInvalidOption, n)
		}
		o.KeyConcurrency = n
		return nil
	}
}

// Unordered makes the group unordered: for handlers that need no per-key order (each event
// stands alone: a notification, an idempotent write, a fan-out), in exchange for throughput
// and for scaling out without package partition.
//
// An unordered group's consumers ("<group>_p<n>", one per partition as for every group) are
// created without the pinned_client priority policy, so every subscriber of the group —
// every replica calling Subscribe with Unordered — pulls every partition at once, and the
// server spreads the events among their pulls. There is no pin, no takeover, no hand-back
// on stop and no per-key order: two events of one key may be handled at once by two
// replicas, or in either order. What a delivery is does not change: at-least-once,
// MaxAttempts, Backoff, Permanent, ManualAck, Filter and the dead-letter middleware and
// sweeper behave as in an ordered group. Events of a partition are still handled one at a
// time per subscriber unless KeyConcurrency(n) is set, which then handles n at once
// whatever their keys. MaxInFlight is the consumer's bound on unacknowledged events, shared
// by all the subscribers of a partition: raise it with the number of replicas.
//
// A delivery a subscriber fetched but did not start when it stops (Stop; Drain handles
// them) is given back with a nak and counts as a delivery: its next Attempt is one higher.
// One on its last attempt is handled instead, so that the server never gives up on an event
// no handler saw. Deliveries lost on the way to a subscriber (a reconnect) come back after
// AckTimeout. The acks of events handled one after the other go out together, within a
// millisecond of the handler's return.
//
// A group is ordered or unordered from its first subscription on (the consumers record it):
// subscribing an ordered group with Unordered, or an unordered group without it, fails with
// ErrInvalidOption, so that no subscriber breaks the others' fence. To change, use a new
// group (From positions it where the old one was). Package partition (leases, assignments)
// is for ordered groups and refuses Unordered; so does SubscribePartition.
func Unordered() SubscribeOption {
	return func(o *SubscribeOptions) error { o.Unordered = true; return nil }
}
