package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/option"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/spans"
	"github.com/jetbus/jetbus/internal/streamcfg"
)

// Names on the wire.
const (
	StreamName    = "DLQ"
	SubjectPrefix = "dlq."
	// RejectsStreamName holds the messages ingress refused (reason ReasonIngress), on
	// subjects RejectsSubjectPrefix+"<topic>", with bounds of their own (Config.Rejects): a
	// flood of refusals ages out refusals, never the handlers' dead letters in StreamName.
	// (A topic's subjects cannot start with it: topic names have no "_".)
	RejectsStreamName    = "DLQ_REJECTS"
	RejectsSubjectPrefix = "dlq_rejects."
	AdvisoryStreamName   = "DLQ_ADVISORIES"
	// AdvisorySubjects are the JetStream advisories the safety net captures.
	AdvisorySubjects = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
	ParkBucket       = "jetbus_dlq_parked"
	// ReplayBucket records which group each replayed event is meant for (key: the event ID
	// in base64url, value: JSON {"group","topic","key","sha256"}: the group, and the topic,
	// key and SHA-256 of the body Replay published). Only Replay writes it.
	ReplayBucket = "jetbus_dlq_replays"
	// ReplayRecordTTL is how long a replay record is kept: a group that reaches a replayed
	// event later than that handles it (a duplicate, never a loss).
	ReplayRecordTTL = 7 * 24 * time.Hour
)

// Dead-letter headers.
const (
	HeaderReason          = "x-dlq-reason"
	HeaderError           = "x-dlq-error"
	HeaderGroup           = "x-dlq-group"
	HeaderAttempts        = "x-dlq-attempts"
	HeaderOriginalSubject = "x-dlq-original-subject"
	HeaderOriginalStream  = "x-dlq-original-stream"
	HeaderOriginalSeq     = "x-dlq-original-seq"
	HeaderOriginalID      = "x-dlq-original-id"
	HeaderTS              = "x-dlq-ts"
	// HeaderBodySize and HeaderBodySHA256 are set on a refusal whose body was cut to
	// Config.Rejects.MaxBody: the whole body's size in bytes (decimal) and its SHA-256 (hex).
	HeaderBodySize   = "x-dlq-body-size"
	HeaderBodySHA256 = "x-dlq-body-sha256"
	// HeaderTopic is the topic of a refusal filed under RejectsOtherSubject (a topic ingress
	// does not serve): its subject does not name it.
	HeaderTopic = "x-dlq-topic"
)

// Reasons.
const (
	ReasonMaxAttempts   = "max-attempts"
	ReasonPermanent     = "permanent"
	ReasonDecode        = "decode"
	ReasonMaxDeliveries = "max-deliveries"
	ReasonParked        = "parked"
	// ReasonProjection: a projection could not apply the event to its view (the document
	// is too large, a field name MongoDB refuses, a payload of the wrong shape, a unique index
	// clash); see Queue.DeadLetter.
	ReasonProjection = "projection"
	// ReasonIngress: ingress refused a message published without a reply subject; see
	// Queue.Reject.
	ReasonIngress = "ingress"
	// ReasonChangefeed: a changefeed could not publish a change (too large, refused by the
	// topic's schema); see Queue.Reject.
	ReasonChangefeed = "changefeed"
)

// Defaults of Config, and of the sweeper's interval (RunSweeper). DefaultMaxAge,
// DefaultMaxBytes and the DefaultRejects… ones are the processes' (the configuration's
// dlq.max_age, dlq.max_bytes, dlq.rejects.max_age and dlq.rejects.max_bytes), so that refused
// traffic cannot fill a disk; a Config's zero values keep letters for ever, unbounded, as a
// program of its own may choose.
const (
	DefaultReplicas        = 1
	DefaultDuplicateWindow = 24 * time.Hour
	DefaultSweepInterval   = time.Second
	DefaultMaxAge          = 30 * 24 * time.Hour
	DefaultMaxBytes        = 1 << 30
	DefaultRejectsMaxAge   = 7 * 24 * time.Hour
	DefaultRejectsMaxBytes = 256 << 20
	DefaultRejectsMaxBody  = 64 << 10
)

// RejectsDuplicateWindow is how long RejectsStreamName remembers a refusal's ID (at most; less
// when Config.DuplicateWindow or Config.Rejects.MaxAge is shorter): long enough for ingress's
// retries of one dead letter and a client's quick retries of one message, short enough that
// the IDs the server keeps in memory (every ID of the window, per replica, whether or not the
// refusal is still stored) stay bounded under a flood: about 200 bytes each (a refusal's ID
// is at most 92 bytes, a client's long ID hashed), about 24 MB per replica at 1,000
// refusals a second.
const RejectsDuplicateWindow = 2 * time.Minute

// Config configures a Queue. The zero value of every field is a usable default.
type Config struct {
	// Replicas of the DLQ's streams (the DLQ, the refusals' and the advisories') and buckets
	// (parking and replay records) (0: 1; at most 5).
	Replicas int
	// MaxAge bounds how long dead letters are kept (0: forever).
	MaxAge time.Duration
	// MaxBytes bounds the DLQ stream's size; past it the oldest letters are dropped (0:
	// unbounded). RunSweeper reports letters dropped by either limit
	// (dlq_dropped_by_limit_total, and a warning).
	MaxBytes int64
	// DuplicateWindow is how long a moved delivery is remembered (0: 24h, or MaxAge when
	// that is shorter). Ingress's refusals are remembered RejectsDuplicateWindow at most.
	DuplicateWindow time.Duration
	// Rejects bounds the stream of the messages ingress refused (RejectsStreamName).
	Rejects RejectsConfig
	// Parking turns per-key parking on.
	Parking bool
	// Attach uses the DLQ's streams and buckets as they are when they exist, and creates the
	// missing ones with this Config. Without it Open and Ensure also update the existing ones
	// whose configuration differs from this Config. The process that owns the DLQ's settings (the bridge, from the operator's
	// configuration) leaves it off; tools and programs that only dead-letter or read beside
	// it set it, so that they cannot change the DLQ's replicas or retention.
	Attach bool
}

// RejectsConfig bounds the stream of ingress's refusals, apart from the DLQ's: refused client
// traffic, a flood of it included, is kept within these, and ages out no handler's dead letter.
type RejectsConfig struct {
	// MaxAge bounds how long refusals are kept (0: forever).
	MaxAge time.Duration
	// MaxBytes bounds the stream's size; past it the oldest refusals are dropped (0:
	// unbounded), reported like the DLQ's (dlq_dropped_by_limit_total{stream="DLQ_REJECTS"}).
	MaxBytes int64
	// MaxBody bounds the body kept of each refusal (0: whole). A longer one keeps its first
	// MaxBody bytes, with its size and SHA-256 (HeaderBodySize, HeaderBodySHA256); such a
	// letter cannot be replayed.
	MaxBody int
}

// Validate reports whether c is usable. Its errors wrap ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("%w: Replicas must be between 0 and 5, got %d", ErrInvalidConfig, c.Replicas)
	case c.MaxAge < 0:
		return fmt.Errorf("%w: MaxAge must not be negative, got %s", ErrInvalidConfig, c.MaxAge)
	case c.MaxBytes < 0:
		return fmt.Errorf("%w: MaxBytes must not be negative, got %d", ErrInvalidConfig, c.MaxBytes)
	case c.DuplicateWindow < 0:
		return fmt.Errorf("%w: DuplicateWindow must not be negative, got %s", ErrInvalidConfig, c.DuplicateWindow)
	case c.Rejects.MaxAge < 0:
		return fmt.Errorf("%w: Rejects.MaxAge must not be negative, got %s", ErrInvalidConfig, c.Rejects.MaxAge)
	case c.Rejects.MaxBytes < 0:
		return fmt.Errorf("%w: Rejects.MaxBytes must not be negative, got %d", ErrInvalidConfig, c.Rejects.MaxBytes)
	case c.Rejects.MaxBody < 0:
		return fmt.Errorf("%w: Rejects.MaxBody must not be negative, got %d", ErrInvalidConfig, c.Rejects.MaxBody)
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxAge > 0 && c.DuplicateWindow > c.MaxAge {
		c.DuplicateWindow = c.MaxAge
	}
	return c, nil
}

// JetStream is what a Queue needs of a JetStream context: the DLQ and advisory streams, the
// parking bucket, the sweeper's consumer, scans of the DLQ and dead-letter publishes.
// natsjs.JetStream has it.
type JetStream interface {
	OrderedConsumer(ctx context.Context, stream string, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error)
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...natsjs.PublishOpt) (*natsjs.PubAck, error)
	Stream(ctx context.Context, name string) (natsjs.Stream, error)
	CreateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error)
	UpdateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error)
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg natsjs.ConsumerConfig) (natsjs.Consumer, error)
	CreateKeyValue(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error)
	UpdateKeyValue(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error)
	KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error)
}

var _ JetStream = natsjs.JetStream(nil)

// Queue is the dead-letter queue of one JetStream account.
type Queue struct {
	js      JetStream
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	tracer  trace.Tracer // nil: the Queue does not trace
	advLog  atomic.Int64 // Unix nanoseconds of the last warning about a refused advisory
	rejLog  atomic.Int64 // Unix nanoseconds of the last warning about a rejected message
	// mismatchLog: Unix nanoseconds of the last warning about an event reusing a replay's ID
	mismatchLog atomic.Int64

	parkKV   natsjs.KeyValue
	replayKV natsjs.KeyValue
	mu       sync.Mutex
	parked   map[string]*parkSet // by "<group>.<stream>"
	closed   bool
	wg       sync.WaitGroup
	stop     chan struct{}
}

// Open ensures the DLQ stream (and, with parking, the parking bucket) and returns the Queue.
// Close it to stop its watchers. Options: WithLogger, WithRegisterer, WithTracerProvider.
func Open(ctx context.Context, js JetStream, cfg Config, opts ...Option) (*Queue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o, err := option.Apply[option.Common](opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	q := &Queue{js: js, cfg: cfg, log: o.Logger, metrics: m, tracer: spans.Tracer(o.TracerProvider, scope),
		parked: make(map[string]*parkSet), stop: make(chan struct{})}
	if err := q.Ensure(ctx); err != nil {
		return nil, err
	}
	rkv, err := q.ensureBucket(ctx, natsjs.KeyValueConfig{
		Bucket:      ReplayBucket,
		Description: "jetbus: the group each replayed event is meant for",
		Replicas:    cfg.Replicas,
		History:     1,
		TTL:         ReplayRecordTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("dlq: replay bucket: %w", retry.Opaque(err))
	}
	q.replayKV = rkv
	if cfg.Parking {
		kv, err := q.ensureBucket(ctx, natsjs.KeyValueConfig{
			Bucket:      ParkBucket,
			Description: "jetbus: keys parked behind a dead letter, per group",
			Replicas:    cfg.Replicas,
			History:     1,
		})
		if err != nil {
			return nil, fmt.Errorf("dlq: parking bucket: %w", retry.Opaque(err))
		}
		q.parkKV = kv
	}
	return q, nil
}

// Ensure creates the DLQ's streams (the DLQ, the refusals' and the advisories'), or updates
// those that lack what the Config asks for. Open calls it; call it again to bring back a
// stream that was deleted.
func (q *Queue) Ensure(ctx context.Context) error {
	err := q.ensureStream(ctx, natsjs.StreamConfig{
		Name:        StreamName,
		Description: "jetbus dead letters",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   natsjs.LimitsPolicy,
		MaxAge:      q.cfg.MaxAge,
		MaxBytes:    unlimitedIfZero(q.cfg.MaxBytes),
		Discard:     natsjs.DiscardOld,
		Replicas:    q.cfg.Replicas,
		Duplicates:  q.cfg.DuplicateWindow,
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("dlq: stream %s: %w", StreamName, retry.Opaque(err))
	}
	// Refusals are a client's doing: the server keeps every ID of the window in memory, so
	// the window is short (RejectsDuplicateWindow), whatever the DLQ's.
	dup := min(q.cfg.DuplicateWindow, RejectsDuplicateWindow)
	if q.cfg.Rejects.MaxAge > 0 {
		dup = min(dup, q.cfg.Rejects.MaxAge)
	}
	err = q.ensureStream(ctx, natsjs.StreamConfig{
		Name:        RejectsStreamName,
		Description: "jetbus: messages ingress refused",
		Subjects:    []string{RejectsSubjectPrefix + ">"},
		Retention:   natsjs.LimitsPolicy,
		MaxAge:      q.cfg.Rejects.MaxAge,
		MaxBytes:    unlimitedIfZero(q.cfg.Rejects.MaxBytes),
		Discard:     natsjs.DiscardOld,
		Replicas:    q.cfg.Replicas,
		Duplicates:  dup,
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("dlq: stream %s: %w", RejectsStreamName, retry.Opaque(err))
	}
	return q.ensureAdvisories(ctx)
}

// ensureStream creates a stream of the DLQ, or updates it when it lacks what cfg asks for
// (only then: internal/streamcfg says why); with Config.Attach an existing one is left as it
// is.
//
// Attaching never asks for an update: a NATS user that may create but not update the DLQ's
// streams (the projector's, deploy/nats/auth.conf) can attach.
func (q *Queue) ensureStream(ctx context.Context, cfg natsjs.StreamConfig) error {
	for try := 1; ; try++ {
		s, err := q.js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, natsjs.ErrStreamNotFound):
			_, err = q.js.CreateStream(ctx, cfg)
			if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) && try < streamcfg.CreateTries {
				continue // created meanwhile by another process: look again
			}
			return err
		case err != nil || q.cfg.Attach || streamcfg.Holds(s.CachedInfo().Config, cfg):
			return err
		}
		_, err = q.js.UpdateStream(ctx, cfg)
		return err
	}
}

// ensureBucket is ensureStream for a bucket.
func (q *Queue) ensureBucket(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error) {
	for try := 1; ; try++ {
		kv, err := q.js.KeyValue(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, natsjs.ErrBucketNotFound):
			kv, err = q.js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, natsjs.ErrBucketExists) && try < streamcfg.CreateTries {
				continue // created meanwhile by another process: look again
			}
			return kv, err
		case err != nil || q.cfg.Attach:
			return kv, err
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, err
		}
		if streamcfg.BucketHolds(st.Config(), cfg) {
			return kv, nil
		}
		return q.js.UpdateKeyValue(ctx, cfg)
	}
}

// MaxRejectBody is Config.Rejects.MaxBody: the body kept of a message ingress refused (0:
// whole). Ingress leaves such bodies whole for Reject to cut, hash and measure.
func (q *Queue) MaxRejectBody() int { return q.cfg.Rejects.MaxBody }

// Close stops the Queue's watchers.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.stop)
	q.mu.Unlock()
	q.wg.Wait()
	return nil
}

// unlimitedIfZero is a stream limit as JetStream spells "none": -1.
func unlimitedIfZero(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}
