package projection

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/mongoname"
	"github.com/jetbus/jetbus/partition"
)

// Mode says how a changelog projection turns an event's payload into its view document.
type Mode string

// Modes of a changelog projection.
const (
	// Replace: the payload is the key's whole state (the default).
	Replace Mode = "replace"
	// Merge: the payload's top-level fields are set, its null fields removed; fields it does
	// not name are kept.
	Merge Mode = "merge"
)

// Tombstones says what a tombstone (a JSON null payload) does to the key's document.
type Tombstones string

// Tombstone policies.
const (
	// DeleteTombstones removes the document (the default).
	DeleteTombstones Tombstones = "delete"
	// KeepTombstones keeps the document with its metadata and _deleted: true, and nothing
	// else.
	KeepTombstones Tombstones = "keep"
)

// Defaults and limits of Config.
const (
	DefaultMode         = Replace
	DefaultTombstones   = DeleteTombstones
	DefaultBatchSize    = 500
	MaxBatchSize        = 10000
	DefaultLinger       = 5 * time.Millisecond
	DefaultStopTimeout  = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultAckTimeout   = 30 * time.Second
	// DefaultDeletedRetention is Config.DeletedRetention's default.
	DefaultDeletedRetention = 24 * time.Hour
	// DefaultMaxVersionStep is Config.MaxVersionStep's default, 2^50: what a version counted
	// in milliseconds moves in 35,000 years, in microseconds in 35 years, in nanoseconds in
	// 13 days.
	DefaultMaxVersionStep int64 = 1 << 50
	// UnboundedVersionStep as Config.MaxVersionStep lets one event move a key's version by
	// any amount (versions are at most math.MaxInt64).
	UnboundedVersionStep int64 = math.MaxInt64
)

// Index is a secondary index of a changelog projection's collection, created at start.
type Index struct {
	// Fields in order; a leading "-" sorts that field descending.
	Fields []string
	// Unique refuses two documents with the same values; a clash dead-letters the event
	// that caused it.
	Unique bool
	// Name of the index (default: MongoDB's, from the fields).
	Name string
}

// Config configures a projection. Name, Topic and Database are required; a changelog
// projection also needs Collection. The zero value of every other field is a usable default.
type Config struct {
	// Name names the projection. It is the consumer group of generation 0 (a rebuild's
	// generation N consumes as "<Name>-g<N>"), so it must be a valid group name.
	Name string
	// Topic is the topic read; FanIn adds more topics, read by the same projection into the
	// same collection. With FanIn, Version is required: stream sequences of different topics
	// do not order each other.
	Topic string
	FanIn []string
	// Database holds the view, its history and the checkpoints (jetbus_checkpoints) and
	// live-generation records (jetbus_projections).
	Database string
	// Collection is the changelog projection's view of generation 0 (generation N writes
	// "<Collection>-g<N>"); unused by a transactional projection.
	Collection string
	// Mode is Replace (default) or Merge.
	Mode Mode
	// Version is a JSON pointer (RFC 6901) to the version in the payload, e.g. "/version":
	// an integer. Empty: the event's stream sequence. A write applies only over a smaller
	// version. A tombstone has no payload: with a Version pointer it carries its version in
	// the header x-version (decimal); one without is dead-lettered. A version is an integer
	// from 0 to math.MaxInt64; an event with any other is dead-lettered.
	Version string
	// MaxVersionStep bounds, with Version, how far one event moves a key's version: an event
	// whose version is more than MaxVersionStep above the key's stored version is
	// dead-lettered, not applied, so that one event (a producer's bug, a hostile client)
	// cannot put a key out of reach of every later version — 2^63-1 after 5 would otherwise
	// make every later event of the key stale. A key with no stored version takes any
	// version. Default DefaultMaxVersionStep; UnboundedVersionStep removes the bound. It
	// does not apply with WithWriteModels (the write models guard themselves) nor to stream
	// sequences (without Version), which producers do not choose.
	MaxVersionStep int64
	// Tombstones is DeleteTombstones (default) or KeepTombstones. Either way a tombstone
	// leaves a marker {_id, _v, _ts, _topic, _deleted: true} that readers treat as absent and
	// that keeps the key's version, so an older event arriving later cannot bring the key
	// back; with DeleteTombstones the marker also has _expires and a TTL index removes it
	// after DeletedRetention.
	Tombstones Tombstones
	// DeletedRetention is how long a deleted key's marker is kept with DeleteTombstones
	// (default DefaultDeletedRetention, at least 1s): longer than any event of that key can
	// arrive late (a producer's out-of-order event, a replay).
	DeletedRetention time.Duration
	// Indexes are created at start, idempotently.
	Indexes []Index
	// History, when positive, also writes every applied version to
	// "<collection>_history" with a TTL index expiring it after History.
	History time.Duration
	// BatchSize is the most events written per bulk write (transaction, for a
	// transactional projection) and fetched at once: default DefaultBatchSize, at most
	// MaxBatchSize. It is an upper bound: batches grow toward it with the backlog and shrink
	// when the topic is quiet (see the package doc, "How a batch is written").
	BatchSize int
	// Linger is how long a partition waits for a batch to fill before writing what it has
	// (default DefaultLinger). It bounds the latency a quiet topic adds; under a backlog
	// batches fill to BatchSize before it passes.
	Linger time.Duration
	// MaxInFlight bounds the events of one partition delivered and not yet written and
	// acknowledged (default 4×BatchSize, at least BatchSize).
	MaxInFlight int
	// AckTimeout is the subscription's ack timeout (default DefaultAckTimeout). A partition
	// keeps the events it holds alive (InProgress every third of AckTimeout) while their
	// batch is written or retried, or waits behind another.
	AckTimeout time.Duration
	// WriteTimeout bounds one try of a batch's writes (default DefaultWriteTimeout); keep it
	// below AckTimeout.
	WriteTimeout time.Duration
	// StopTimeout bounds how long a partition that is stopped or handed to another replica
	// keeps trying to write the events it holds (default DefaultStopTimeout); what is not
	// written by then is delivered again to the next owner.
	StopTimeout time.Duration
	// MaxAttempts is how many times a transactional projection's handler may fail on an
	// event before the event is dead-lettered (default jetbus.DefaultMaxAttempts).
	MaxAttempts int
	// From is where a new consumer group starts: the earliest event by default, so that the
	// view holds every key the stream still has.
	From *jetbus.Position
	// MemberID, TTL and Replicas are the partitioned subscriber's (partition.Config).
	MemberID string
	TTL      time.Duration
	Replicas int
}

// Validate reports whether c is usable. Bad topic and group names wrap jetbus.ErrInvalidTopic
// and jetbus.ErrInvalidGroup; the other errors wrap ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	if err := jetbus.ValidateGroup(c.Name); err != nil {
		return fmt.Errorf("Name: %w", err)
	}
	if err := jetbus.ValidateTopic(c.Topic); err != nil {
		return fmt.Errorf("Topic: %w", err)
	}
	for _, t := range c.FanIn {
		if err := jetbus.ValidateTopic(t); err != nil {
			return fmt.Errorf("FanIn: %w", err)
		}
		if t == c.Topic {
			return fmt.Errorf("%w: FanIn repeats Topic %s", ErrInvalidConfig, t)
		}
	}
	if len(c.FanIn) > 0 && c.Version == "" {
		return fmt.Errorf("%w: FanIn needs Version: stream sequences of different topics do not order each other", ErrInvalidConfig)
	}
	if err := mongoname.Database(c.Database); err != nil {
		return fmt.Errorf("%w: Database: %v", ErrInvalidConfig, err)
	}
	if c.Collection != "" {
		if err := mongoname.Collection(c.Collection); err != nil {
			return fmt.Errorf("%w: Collection: %v", ErrInvalidConfig, err)
		}
	}
	switch c.Mode {
	case "", Replace, Merge:
	default:
		return fmt.Errorf("%w: Mode must be %q or %q, got %q", ErrInvalidConfig, Replace, Merge, c.Mode)
	}
	switch c.Tombstones {
	case "", DeleteTombstones, KeepTombstones:
	default:
		return fmt.Errorf("%w: Tombstones must be %q or %q, got %q", ErrInvalidConfig, DeleteTombstones, KeepTombstones, c.Tombstones)
	}
	if c.Version != "" {
		if _, err := parsePointer(c.Version); err != nil {
			return fmt.Errorf("%w: Version: %v", ErrInvalidConfig, err)
		}
	}
	for i, ix := range c.Indexes {
		if len(ix.Fields) == 0 {
			return fmt.Errorf("%w: Indexes[%d]: no fields", ErrInvalidConfig, i)
		}
		for _, f := range ix.Fields {
			if err := mongoname.FieldPath(strings.TrimPrefix(f, "-")); err != nil {
				return fmt.Errorf("%w: Indexes[%d]: %v", ErrInvalidConfig, i, err)
			}
		}
	}
	switch {
	case c.History < 0:
		return fmt.Errorf("%w: History must not be negative, got %s", ErrInvalidConfig, c.History)
	case c.History > 0 && c.History < time.Second:
		return fmt.Errorf("%w: History must be at least 1s (a TTL index counts seconds), got %s", ErrInvalidConfig, c.History)
	case c.DeletedRetention < 0 || (c.DeletedRetention > 0 && c.DeletedRetention < time.Second):
		return fmt.Errorf("%w: DeletedRetention must be at least 1s, got %s", ErrInvalidConfig, c.DeletedRetention)
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("%w: BatchSize must be between 1 and %d, got %d", ErrInvalidConfig, MaxBatchSize, c.BatchSize)
	case c.Linger < 0:
		return fmt.Errorf("%w: Linger must not be negative, got %s", ErrInvalidConfig, c.Linger)
	case c.MaxInFlight < 0 || (c.MaxInFlight > 0 && c.MaxInFlight < max(c.BatchSize, 1)):
		return fmt.Errorf("%w: MaxInFlight must be at least BatchSize, got %d", ErrInvalidConfig, c.MaxInFlight)
	case c.AckTimeout < 0 || (c.AckTimeout > 0 && c.AckTimeout < time.Second):
		return fmt.Errorf("%w: AckTimeout must be at least 1s, got %s", ErrInvalidConfig, c.AckTimeout)
	case c.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts must not be negative, got %d", ErrInvalidConfig, c.MaxAttempts)
	case c.WriteTimeout < 0:
		return fmt.Errorf("%w: WriteTimeout must not be negative, got %s", ErrInvalidConfig, c.WriteTimeout)
	case c.StopTimeout < 0:
		return fmt.Errorf("%w: StopTimeout must not be negative, got %s", ErrInvalidConfig, c.StopTimeout)
	case c.MaxVersionStep < 0:
		return fmt.Errorf("%w: MaxVersionStep must be positive (UnboundedVersionStep for no bound), got %d", ErrInvalidConfig, c.MaxVersionStep)
	}
	ack := c.AckTimeout
	if ack == 0 {
		ack = DefaultAckTimeout
	}
	if c.WriteTimeout >= ack {
		return fmt.Errorf("%w: WriteTimeout (%s) must be below AckTimeout (%s)", ErrInvalidConfig, c.WriteTimeout, ack)
	}
	pc := partition.Config{Topic: c.Topic, Group: c.Name, MemberID: c.MemberID, TTL: c.TTL, Replicas: c.Replicas}
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.Tombstones == "" {
		c.Tombstones = DefaultTombstones
	}
	if c.DeletedRetention == 0 {
		c.DeletedRetention = DefaultDeletedRetention
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4 * c.BatchSize
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = min(DefaultWriteTimeout, c.AckTimeout/2)
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.MaxVersionStep == 0 {
		c.MaxVersionStep = DefaultMaxVersionStep
	}
	if c.From == nil {
		e := jetbus.Earliest()
		c.From = &e
	}
	return c, nil
}

func (c Config) maxAttempts() int {
	if c.MaxAttempts == 0 {
		return jetbus.DefaultMaxAttempts
	}
	return c.MaxAttempts
}

// topics returns Topic and FanIn.
func (c Config) topics() []string { return append([]string{c.Topic}, c.FanIn...) }
