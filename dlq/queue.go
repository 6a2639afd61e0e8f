package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Names on the wire.
const (
	StreamName         = "DLQ"
	SubjectPrefix      = "dlq."
	AdvisoryStreamName = "DLQ_ADVISORIES"
	// AdvisorySubjects are the JetStream advisories the safety net captures.
	AdvisorySubjects = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
	ParkBucket       = "jetbus_dlq_parked"
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
	// HeaderReplayGroup marks a replayed event with the group it failed in.
	HeaderReplayGroup = "x-dlq-replay-group"
)

// Reasons.
const (
	ReasonMaxAttempts   = "max-attempts"
	ReasonPermanent     = "permanent"
	ReasonDecode        = "decode"
	ReasonMaxDeliveries = "max-deliveries"
	ReasonParked        = "parked"
)

// Config configures a Queue. The zero value is usable: Open fills the defaults.
type Config struct {
	// Replicas of the DLQ, advisory stream and parking bucket (default 1).
	Replicas int
	// MaxAge bounds how long dead letters are kept (default 0: forever).
	MaxAge time.Duration
	// DuplicateWindow is how long a moved delivery is remembered (default 24h).
	DuplicateWindow time.Duration
	// Parking turns per-key parking on.
	Parking bool
	// Registerer receives the metrics dlq_dead_letters_total{topic,group,reason},
	// dlq_replayed_total{topic}, dlq_discarded_total{topic} and dlq_parked_keys (nil: none).
	Registerer prometheus.Registerer
	// Logger (nil: discard).
	Logger *slog.Logger
}

// Validate checks c and fills defaults.
func (c *Config) Validate() error {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 24 * time.Hour
	}
	if c.Replicas < 1 || c.Replicas > 5 || c.MaxAge < 0 || c.DuplicateWindow < 0 {
		return fmt.Errorf("dlq: invalid config: replicas %d, max age %s, duplicate window %s", c.Replicas, c.MaxAge, c.DuplicateWindow)
	}
	if c.MaxAge > 0 && c.DuplicateWindow > c.MaxAge {
		c.DuplicateWindow = c.MaxAge
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Queue is the dead-letter queue of one JetStream account.
type Queue struct {
	js      natsjs.JetStream
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	parkKV natsjs.KeyValue
	mu     sync.Mutex
	parked map[string]*parkSet // by "<group>.<stream>"
	closed bool
	wg     sync.WaitGroup
	stop   chan struct{}
}

// Open ensures the DLQ stream (and, with parking, the parking bucket) and returns the Queue.
// Close it to stop its watchers.
func Open(ctx context.Context, js natsjs.JetStream, cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	q := &Queue{js: js, cfg: cfg, log: cfg.Logger, metrics: m, parked: make(map[string]*parkSet), stop: make(chan struct{})}
	if err := q.Ensure(ctx); err != nil {
		return nil, err
	}
	if cfg.Parking {
		kv, err := js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      ParkBucket,
			Description: "jetbus: keys parked behind a dead letter, per group",
			Replicas:    cfg.Replicas,
			History:     1,
		})
		if err != nil {
			return nil, fmt.Errorf("dlq: parking bucket: %w", err)
		}
		q.parkKV = kv
	}
	return q, nil
}

// Ensure creates or updates the DLQ stream. Open calls it; call it again to bring back a DLQ
// stream that was deleted.
func (q *Queue) Ensure(ctx context.Context) error {
	_, err := q.js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{
		Name:        StreamName,
		Description: "jetbus dead letters",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   natsjs.LimitsPolicy,
		MaxAge:      q.cfg.MaxAge,
		Replicas:    q.cfg.Replicas,
		Duplicates:  q.cfg.DuplicateWindow,
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("dlq: stream %s: %w", StreamName, err)
	}
	return q.ensureAdvisories(ctx)
}

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

func (q *Queue) stream(ctx context.Context) (natsjs.Stream, error) {
	s, err := q.js.Stream(ctx, StreamName)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrDLQUnavailable, err)
	}
	return s, err
}
