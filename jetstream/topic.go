package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// TopicConfig describes a topic's stream.
type TopicConfig struct {
	// Name is the topic (jetbus.ValidateTopic).
	Name string
	// Partitions is the number of partitions (default 1). It can grow, never shrink.
	Partitions int
	// Replicas is the stream's replication factor (default 1; 3 on a 3-node cluster).
	Replicas int
	// MaxAge bounds how long events are kept (0: forever).
	MaxAge time.Duration
	// MaxBytes bounds the stream's size (0: unlimited); the oldest events go first.
	MaxBytes int64
	// Storage is file (default) or memory.
	Storage natsjs.StorageType
	// DuplicateWindow is how long a published event ID is remembered to drop duplicates
	// (default 2 minutes).
	DuplicateWindow time.Duration
}

// MaxPartitions bounds a topic's partition count.
const MaxPartitions = 4096

// Validate reports whether c is usable. A bad name wraps jetbus.ErrInvalidTopic; the other
// errors wrap ErrInvalidConfig and name the field. Zero values are defaults.
func (c TopicConfig) Validate() error {
	if err := jetbus.ValidateTopic(c.Name); err != nil {
		return err
	}
	switch {
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%w: Partitions must be in [1, %d], got %d", ErrInvalidConfig, MaxPartitions, c.Partitions)
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("%w: Replicas must be in [1, 5], got %d", ErrInvalidConfig, c.Replicas)
	case c.MaxAge < 0:
		return fmt.Errorf("%w: MaxAge must not be negative, got %s", ErrInvalidConfig, c.MaxAge)
	case c.MaxBytes < 0:
		return fmt.Errorf("%w: MaxBytes must not be negative, got %d", ErrInvalidConfig, c.MaxBytes)
	case c.DuplicateWindow < 0:
		return fmt.Errorf("%w: DuplicateWindow must not be negative, got %s", ErrInvalidConfig, c.DuplicateWindow)
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c TopicConfig) withDefaults() (TopicConfig, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	return c, nil
}

func (c TopicConfig) streamConfig() natsjs.StreamConfig {
	subjects := make([]string, c.Partitions)
	for i := range subjects {
		subjects[i] = jetbus.PartitionSubject(c.Name, i)
	}
	maxBytes := c.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return natsjs.StreamConfig{
		Name:        jetbus.StreamName(c.Name),
		Description: "jetbus topic " + c.Name,
		Subjects:    subjects,
		Retention:   natsjs.LimitsPolicy,
		Discard:     natsjs.DiscardOld,
		MaxAge:      c.MaxAge,
		MaxBytes:    maxBytes,
		MaxMsgs:     -1,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		AllowDirect: true,
		Metadata: map[string]string{
			jetbus.MetaTopic:      c.Name,
			jetbus.MetaPartitions: strconv.Itoa(c.Partitions),
			jetbus.MetaVersion:    "1",
		},
	}
}

// EnsureTopic creates the topic's stream, or updates it to cfg. It refuses to shrink the
// partition count (ErrInvalidConfig).
func (b *Bus) EnsureTopic(ctx context.Context, cfg TopicConfig) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	sc := cfg.streamConfig()
	s, err := b.js.Stream(ctx, sc.Name)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
		if _, err := b.js.CreateStream(ctx, sc); err != nil && !errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("jetbus: create topic %s: %w", cfg.Name, retry.Opaque(err))
		} else if err != nil {
			return b.EnsureTopic(ctx, cfg) // created concurrently: update instead
		}
	case err != nil:
		return fmt.Errorf("jetbus: topic %s: %w", cfg.Name, retry.Opaque(err))
	default:
		old, err := partitionsOf(s.CachedInfo().Config)
		if err != nil {
			return err
		}
		if cfg.Partitions < old {
			return fmt.Errorf("%w: topic %s has %d partitions; Partitions cannot shrink to %d",
				ErrInvalidConfig, cfg.Name, old, cfg.Partitions)
		}
		if _, err := b.js.UpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("jetbus: update topic %s: %w", cfg.Name, retry.Opaque(err))
		}
	}
	b.topics.put(cfg.Name, cfg.Partitions)
	return nil
}

// DeleteTopic deletes the topic's stream with every event and consumer group.
func (b *Bus) DeleteTopic(ctx context.Context, topic string) error {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return err
	}
	b.topics.forget(topic)
	if err := b.js.DeleteStream(ctx, jetbus.StreamName(topic)); err != nil {
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			return fmt.Errorf("%w: %s", jetbus.ErrTopicNotFound, topic)
		}
		return fmt.Errorf("jetbus: delete topic %s: %w", topic, retry.Opaque(err))
	}
	return nil
}

// Partitions returns the topic's partition count, read from its stream metadata (cached).
func (b *Bus) Partitions(ctx context.Context, topic string) (int, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return 0, err
	}
	return b.topics.partitions(ctx, topic)
}

func partitionsOf(sc natsjs.StreamConfig) (int, error) {
	v, ok := sc.Metadata[jetbus.MetaPartitions]
	if !ok {
		return 0, fmt.Errorf("%w: stream %s has no %s metadata: not a jetbus topic", jetbus.ErrTopicNotFound, sc.Name, jetbus.MetaPartitions)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("jetbus: stream %s: bad %s metadata %q", sc.Name, jetbus.MetaPartitions, v)
	}
	return n, nil
}

// topicCache caches partition counts and subjects per topic.
type topicCache struct {
	js  natsjs.JetStream
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]*topicEntry
}

type topicEntry struct {
	partitions int
	subjects   []string
	expires    time.Time
}

func (c *topicCache) init(js natsjs.JetStream, ttl time.Duration) {
	c.js, c.ttl, c.m = js, ttl, make(map[string]*topicEntry)
}

func (c *topicCache) put(topic string, n int) *topicEntry {
	e := &topicEntry{partitions: n, subjects: make([]string, n), expires: time.Now().Add(c.ttl)}
	for i := range e.subjects {
		e.subjects[i] = jetbus.PartitionSubject(topic, i)
	}
	c.mu.Lock()
	c.m[topic] = e
	c.mu.Unlock()
	return e
}

func (c *topicCache) forget(topic string) {
	c.mu.Lock()
	delete(c.m, topic)
	c.mu.Unlock()
}

func (c *topicCache) get(ctx context.Context, topic string) (*topicEntry, error) {
	c.mu.RLock()
	e := c.m[topic]
	c.mu.RUnlock()
	if e != nil && time.Now().Before(e.expires) {
		return e, nil
	}
	if e == nil {
		if err := jetbus.ValidateTopic(topic); err != nil {
			return nil, err
		}
	}
	// Asked again while a cluster elects the stream's leader (a member starting then must not
	// fail for a topic that exists).
	var s natsjs.Stream
	err := retry.Do(ctx, lookupPolicy, func(ctx context.Context) error {
		var err error
		s, err = c.js.Stream(ctx, jetbus.StreamName(topic))
		return err
	})
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		c.forget(topic)
		return nil, fmt.Errorf("%w: %s", jetbus.ErrTopicNotFound, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("jetbus: topic %s: %w", topic, retry.Opaque(err))
	}
	n, err := partitionsOf(s.CachedInfo().Config)
	if err != nil {
		return nil, err
	}
	return c.put(topic, n), nil
}

func (c *topicCache) partitions(ctx context.Context, topic string) (int, error) {
	e, err := c.get(ctx, topic)
	if err != nil {
		return 0, err
	}
	return e.partitions, nil
}
