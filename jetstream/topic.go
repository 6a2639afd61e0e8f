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
	"github.com/jetbus/jetbus/internal/streamcfg"
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
	// Keyed makes a keyed topic (the seeds' compaction topic): each event is stored on the
	// subject "<topic>.p<n>.<key token>", so JetStream keeps the last KeepPerKey events of
	// each key and answers "latest of these keys" and "last of this key at time T" directly
	// (see KeyReader). Every event needs a key. A topic cannot change from plain to keyed or
	// back.
	Keyed bool
	// KeepPerKey is how many events of each key a keyed topic keeps (0: all, within MaxAge
	// and MaxBytes). With 1, a group that starts from the earliest event reads one event per
	// key: the topic is its own snapshot.
	KeepPerKey int
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
	case c.KeepPerKey < 0:
		return fmt.Errorf("%w: KeepPerKey must not be negative, got %d", ErrInvalidConfig, c.KeepPerKey)
	case c.KeepPerKey > 0 && !c.Keyed:
		return fmt.Errorf("%w: KeepPerKey needs Keyed", ErrInvalidConfig)
	}
	return nil
}

// Defaults of TopicConfig.
const (
	DefaultPartitions      = 1
	DefaultReplicas        = 1
	DefaultDuplicateWindow = 2 * time.Minute
)

// withDefaults returns c validated with its defaults filled in.
func (c TopicConfig) withDefaults() (TopicConfig, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	return c, nil
}

func (c TopicConfig) streamConfig() natsjs.StreamConfig {
	subjects := make([]string, c.Partitions)
	for i := range subjects {
		subjects[i] = jetbus.PartitionSubject(c.Name, i)
		if c.Keyed {
			subjects[i] += ".>"
		}
	}
	perKey := int64(-1)
	if c.KeepPerKey > 0 {
		perKey = int64(c.KeepPerKey)
	}
	maxBytes := c.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return natsjs.StreamConfig{
		Name:              jetbus.StreamName(c.Name),
		Description:       "jetbus topic " + c.Name,
		Subjects:          subjects,
		Retention:         natsjs.LimitsPolicy,
		Discard:           natsjs.DiscardOld,
		MaxAge:            c.MaxAge,
		MaxBytes:          maxBytes,
		MaxMsgs:           -1,
		MaxMsgsPerSubject: perKey,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		Duplicates:        c.DuplicateWindow,
		AllowDirect:       true,
		Metadata: map[string]string{
			jetbus.MetaTopic:      c.Name,
			jetbus.MetaPartitions: strconv.Itoa(c.Partitions),
			jetbus.MetaVersion:    "1",
			jetbus.MetaKeyed:      strconv.FormatBool(c.Keyed),
			jetbus.MetaKeepPerKey: strconv.Itoa(c.KeepPerKey),
		},
	}
}

// EnsureTopic creates the topic's stream, or updates it to cfg where a field that cfg sets
// differs (a start with an unchanged configuration sends no update). It refuses to shrink the
// partition count and to turn a plain topic keyed or back (ErrInvalidConfig). Through a
// JetStream leader election or a node restart it asks again until ctx ends.
func (b *Bus) EnsureTopic(ctx context.Context, cfg TopicConfig) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	err = retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		err := b.ensureTopic(ctx, cfg)
		warnRetry(b.opts.logger, "topic "+cfg.Name, err)
		return err
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w%s", err, untilEnd(ctx))
	}
	return err
}

// ensureTopic is one try of EnsureTopic.
func (b *Bus) ensureTopic(ctx context.Context, cfg TopicConfig) error {
	sc := cfg.streamConfig()
	s, err := b.js.Stream(ctx, sc.Name)
	created := false
	for try := 1; errors.Is(err, natsjs.ErrStreamNotFound); try++ {
		_, err = b.js.CreateStream(ctx, sc)
		if err == nil {
			created = true
			break
		}
		if !errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) || try == streamcfg.CreateTries {
			return fmt.Errorf("jetbus: create topic %s: %w", cfg.Name, retry.Opaque(err))
		}
		// Created meanwhile by another process with another configuration: check it and
		// update it instead.
		s, err = b.js.Stream(ctx, sc.Name)
	}
	switch {
	case created:
	case err != nil:
		return fmt.Errorf("jetbus: topic %s: %w", cfg.Name, retry.Opaque(err))
	default:
		old, err := layoutOf(s.CachedInfo().Config)
		if err != nil {
			return err
		}
		if cfg.Partitions < old.partitions {
			return fmt.Errorf("%w: topic %s has %d partitions; Partitions cannot shrink to %d",
				ErrInvalidConfig, cfg.Name, old.partitions, cfg.Partitions)
		}
		if cfg.Keyed != old.keyed {
			return fmt.Errorf("%w: topic %s is %s; Keyed cannot change (its events' subjects would)",
				ErrInvalidConfig, cfg.Name, map[bool]string{true: "keyed", false: "plain"}[old.keyed])
		}
		// Only a change is sent (internal/streamcfg says why). Fields jetbus does not set
		// are kept while nothing changes; an update replaces them.
		if !streamcfg.Holds(s.CachedInfo().Config, sc) {
			if _, err := b.js.UpdateStream(ctx, sc); err != nil {
				return fmt.Errorf("jetbus: update topic %s: %w", cfg.Name, retry.Opaque(err))
			}
		}
	}
	b.topics.put(cfg.Name, layout{partitions: cfg.Partitions, keyed: cfg.Keyed})
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

// layout is what the Bus needs to know of a topic's stream to publish and consume: its
// partition count and whether it is keyed.
type layout struct {
	partitions int
	keyed      bool
}

// layoutOf reads a topic's layout from its stream's metadata.
func layoutOf(sc natsjs.StreamConfig) (layout, error) {
	v, ok := sc.Metadata[jetbus.MetaPartitions]
	if !ok {
		return layout{}, fmt.Errorf("%w: stream %s has no %s metadata: not a jetbus topic", jetbus.ErrTopicNotFound, sc.Name, jetbus.MetaPartitions)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return layout{}, fmt.Errorf("jetbus: stream %s: bad %s metadata %q", sc.Name, jetbus.MetaPartitions, v)
	}
	return layout{partitions: n, keyed: sc.Metadata[jetbus.MetaKeyed] == "true"}, nil
}

// topicCache caches each topic's layout and partition subjects.
type topicCache struct {
	js  natsjs.JetStream
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]*topicEntry
}

type topicEntry struct {
	layout
	// subjects[p] is partition p's subject ("<topic>.p<n>"); a keyed topic's events go to
	// subjects[p] + "." + the key's token.
	subjects []string
	expires  time.Time
}

// subject returns the subject of an event with key in partition p.
func (e *topicEntry) subject(p int, key string) string {
	if e.keyed {
		return e.subjects[p] + "." + jetbus.KeyToken(key)
	}
	return e.subjects[p]
}

// filter returns the subject filter of partition p's consumers.
func (e *topicEntry) filter(p int) string {
	if e.keyed {
		return e.subjects[p] + ".>"
	}
	return e.subjects[p]
}

func (c *topicCache) init(js natsjs.JetStream, ttl time.Duration) {
	c.js, c.ttl, c.m = js, ttl, make(map[string]*topicEntry)
}

func (c *topicCache) put(topic string, l layout) *topicEntry {
	n := l.partitions
	e := &topicEntry{layout: l, subjects: make([]string, n), expires: time.Now().Add(c.ttl)}
	for i := range e.subjects {
		e.subjects[i] = jetbus.PartitionSubject(topic, i)
	}
	c.mu.Lock()
	c.m[topic] = e
	c.mu.Unlock()
	return e
}

// peek returns topic's partition count as cached, expired or not, or 0: for a span's
// attribute, before the publish looks the topic up properly.
func (c *topicCache) peek(topic string) int {
	c.mu.RLock()
	e := c.m[topic]
	c.mu.RUnlock()
	if e == nil {
		return 0
	}
	return e.partitions
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
	l, err := layoutOf(s.CachedInfo().Config)
	if err != nil {
		return nil, err
	}
	return c.put(topic, l), nil
}

func (c *topicCache) partitions(ctx context.Context, topic string) (int, error) {
	e, err := c.get(ctx, topic)
	if err != nil {
		return 0, err
	}
	return e.partitions, nil
}
