package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/streamscan"
)

var _ jetbus.KeyReader = (*Bus)(nil)

// Latest implements jetbus.KeyReader with one batched Direct Get ("last message for each of
// these subjects", multi_last) through orbit.go's jetstreamext.
func (b *Bus) Latest(ctx context.Context, topic string, keys ...string) (map[string]*jetbus.Event, error) {
	if len(keys) > jetbus.MaxLatestKeys {
		return nil, fmt.Errorf("%w: %d keys, at most %d", jetbus.ErrInvalidOption, len(keys), jetbus.MaxLatestKeys)
	}
	t, err := b.keyedTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*jetbus.Event, len(keys))
	subjects := make([]string, 0, len(keys))
	for _, k := range keys {
		if err := validReadKey(k); err != nil {
			return nil, err
		}
		subjects = append(subjects, t.subject(jetbus.PartitionOf(k, t.partitions), k))
	}
	if len(subjects) == 0 {
		return out, nil
	}
	slices.Sort(subjects)
	subjects = slices.Compact(subjects)
	err = b.lastMsgs(ctx, topic, subjects, nil, func(e *jetbus.Event) { out[e.Key] = e })
	return out, err
}

// At implements jetbus.KeyReader with one Direct Get of the key's last message up to t.
func (b *Bus) At(ctx context.Context, topic, key string, at time.Time) (*jetbus.Event, error) {
	t, err := b.keyedTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := validReadKey(key); err != nil {
		return nil, err
	}
	subject := t.subject(jetbus.PartitionOf(key, t.partitions), key)
	var found *jetbus.Event
	// The server's up_to_time excludes messages stored at exactly that time; At includes
	// them. Store times have nanosecond precision.
	upTo := at.Add(time.Nanosecond)
	if err := b.lastMsgs(ctx, topic, []string{subject}, &upTo, func(e *jetbus.Event) { found = e }); err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("%w: key %q of %s at %s", jetbus.ErrEventNotFound, key, topic, at.Format(time.RFC3339Nano))
	}
	return found, nil
}

// Versions implements jetbus.KeyReader: a scan of the key's subject.
func (b *Bus) Versions(ctx context.Context, topic, key string) ([]*jetbus.Event, error) {
	if _, err := b.keyedTopic(ctx, topic); err != nil {
		return nil, err
	}
	var out []*jetbus.Event
	err := b.Fold(ctx, topic, key, time.Time{}, func(e *jetbus.Event) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// Fold implements jetbus.KeyReader: an ordered scan of the key's subject (keyed topics) or of
// the key's whole partition, keeping the key's events (plain topics).
func (b *Bus) Fold(ctx context.Context, topic, key string, until time.Time, fn func(*jetbus.Event) error, opts ...jetbus.FoldOption) error {
	if b.isClosed() {
		return jetbus.ErrClosed
	}
	if err := validReadKey(key); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fold function", jetbus.ErrInvalidOption)
	}
	o := jetbus.ApplyFoldOptions(opts...)
	t, err := b.topics.get(ctx, topic)
	if err != nil {
		return err
	}
	p := jetbus.PartitionOf(key, t.partitions)
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{t.subject(p, key)}}
	if o.After > 0 {
		cfg.DeliverPolicy = natsjs.DeliverByStartSequencePolicy
		cfg.OptStartSeq = o.After + 1
	}
	var ferr error
	err = streamscan.Scan(ctx, b.js, jetbus.StreamName(topic), cfg, func(m natsjs.Msg, meta *natsjs.MsgMetadata) bool {
		if !until.IsZero() && meta.Timestamp.After(until) {
			return false
		}
		raw := jetbus.RawMessage{Subject: m.Subject(), Stream: meta.Stream, Seq: meta.Sequence.Stream,
			Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}
		e := &jetbus.Event{}
		_, _ = decode(e, &raw, topic, p, b.keepBaggage) // a body that is not JSON is folded as it is
		if e.Key != key {
			return true // another key of the same partition (plain topics)
		}
		ferr = fn(e)
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("jetbus: fold %s of %s: %w", key, topic, retry.Opaque(err))
	}
	return nil
}

// keyedTopic returns topic's cache entry, or ErrNotKeyed for a plain topic.
func (b *Bus) keyedTopic(ctx context.Context, topic string) (*topicEntry, error) {
	if b.isClosed() {
		return nil, jetbus.ErrClosed
	}
	t, err := b.topics.get(ctx, topic)
	if err != nil {
		return nil, err
	}
	if !t.keyed {
		return nil, fmt.Errorf("%w: %s", jetbus.ErrNotKeyed, topic)
	}
	return t, nil
}

// lastMsgs asks the stream for the last message of each subject (up to time upTo, if set)
// and calls fn with each message found, decoded.
func (b *Bus) lastMsgs(ctx context.Context, topic string, subjects []string, upTo *time.Time, fn func(*jetbus.Event)) error {
	stream := jetbus.StreamName(topic)
	opts := []jetstreamext.GetLastForOpt{jetstreamext.GetLastMsgsBatchSize(len(subjects))}
	if upTo != nil {
		opts = append(opts, jetstreamext.GetLastMsgsUpToTime(*upTo))
	}
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, b.js, stream, subjects, opts...)
	if err != nil {
		return fmt.Errorf("jetbus: read %s: %w", topic, retry.Opaque(err))
	}
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("jetbus: read %s: %w", topic, retry.Opaque(err))
		}
		_, p, _, _ := jetbus.ParseSubject(m.Subject)
		raw := jetbus.RawMessage{Subject: m.Subject, Stream: stream, Seq: m.Sequence, Header: m.Header, Data: m.Data, Time: m.Time}
		e := &jetbus.Event{}
		_, _ = decode(e, &raw, topic, p, b.keepBaggage)
		fn(e)
	}
	return nil
}

// validReadKey refuses a key no event can have.
func validReadKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", jetbus.ErrInvalidKey)
	}
	return jetbus.ValidateKey(key)
}
