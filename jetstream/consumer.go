package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/streamscan"
)

// consumerConfig is the durable consumer of (topic, group, partition p); filter is the
// partition's subject filter (topicEntry.filter).
func (b *Bus) consumerConfig(topic, filter, group string, p int, o *jetbus.SubscribeOptions) natsjs.ConsumerConfig {
	cfg := natsjs.ConsumerConfig{
		Durable:        jetbus.ConsumerName(group, p),
		Description:    fmt.Sprintf("jetbus group %s, topic %s, partition %d", group, topic, p),
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        o.AckTimeout,
		MaxDeliver:     o.MaxAttempts,
		MaxAckPending:  o.MaxInFlight,
		FilterSubject:  filter,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{jetbus.PriorityGroup},
		PinnedTTL:      b.opts.pinnedTTL,
		Metadata: map[string]string{
			"jetbus.topic":     topic,
			"jetbus.group":     group,
			"jetbus.partition": strconv.Itoa(p),
		},
	}
	if o.Unordered {
		// Every subscriber of the group pulls it: no priority policy, no pin.
		cfg.PriorityPolicy, cfg.PriorityGroups, cfg.PinnedTTL = natsjs.PriorityPolicyNone, nil, 0
		cfg.Metadata[jetbus.MetaUnordered] = "true"
	}
	return cfg
}

// unorderedConsumer reports whether cfg is the consumer of an unordered group: one created
// by a subscription with jetbus.Unordered, which says so in its metadata. A consumer without
// the mark is ordered, pinned or not (one created before consumers were pinned is pinned by
// its next subscription).
func unorderedConsumer(cfg *natsjs.ConsumerConfig) bool {
	return cfg.Metadata[jetbus.MetaUnordered] == "true"
}

// checkOrder refuses a subscription whose order (jetbus.Unordered or not) differs from the
// group's, as its existing consumer cfg records it: an unordered subscriber would pull a
// pinned consumer without its pin, and an ordered one would pin a consumer that the group's
// unordered members pull without one (the server would refuse their pulls).
func checkOrder(cfg *natsjs.ConsumerConfig, topic, group string, unordered bool) error {
	switch have := unorderedConsumer(cfg); {
	case have && !unordered:
		return fmt.Errorf("%w: group %s is unordered (its consumer %s of topic %s has no pin): subscribe it with jetbus.Unordered(), or use another group for per-key order",
			jetbus.ErrInvalidOption, group, cfg.Durable, topic)
	case !have && unordered:
		return fmt.Errorf("%w: group %s is ordered (its consumer %s of topic %s is pinned to one client): jetbus.Unordered() would break its members' per-key order; use another group",
			jetbus.ErrInvalidOption, group, cfg.Durable, topic)
	}
	return nil
}

// ensureConsumer returns the durable consumer of (topic, group, p), creating it at the
// position start resolves to when it does not exist, and updating its settings when it does
// (its position is kept).
func (b *Bus) ensureConsumer(ctx context.Context, topic, group string, p int, o *jetbus.SubscribeOptions, start func() (uint64, error)) (natsjs.Consumer, error) {
	stream := jetbus.StreamName(topic)
	t, err := b.topics.get(ctx, topic)
	if err != nil {
		return nil, err
	}
	want := b.consumerConfig(topic, t.filter(p), group, p, o)
	c, err := b.js.Consumer(ctx, stream, want.Durable)
	switch {
	case errors.Is(err, natsjs.ErrConsumerNotFound):
		seq, err := start()
		if err != nil {
			return nil, err
		}
		err = b.createConsumerAt(ctx, stream, want, seq)
		if err != nil && !errors.Is(err, natsjs.ErrConsumerExists) {
			return nil, retry.Opaque(err)
		}
		// Created here, or concurrently by another member (then its position holds, and so
		// does its order).
		c, err = b.js.Consumer(ctx, stream, want.Durable)
		if err != nil {
			return nil, fmt.Errorf("jetbus: consumer %s of %s: %w", want.Durable, topic, retry.Opaque(err))
		}
		if err := checkOrder(&c.CachedInfo().Config, topic, group, o.Unordered); err != nil {
			return nil, err
		}
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("jetbus: consumer %s of %s: %w", want.Durable, topic, retry.Opaque(err))
	}
	have := c.CachedInfo().Config
	if err := checkOrder(&have, topic, group, o.Unordered); err != nil {
		return nil, err
	}
	if have.AckWait == want.AckWait && have.MaxDeliver == want.MaxDeliver &&
		have.MaxAckPending == want.MaxAckPending && have.PinnedTTL == want.PinnedTTL &&
		have.PriorityPolicy == want.PriorityPolicy {
		return c, nil
	}
	upd := have
	upd.AckWait, upd.MaxDeliver, upd.MaxAckPending = want.AckWait, want.MaxDeliver, want.MaxAckPending
	upd.PriorityPolicy, upd.PriorityGroups, upd.PinnedTTL = want.PriorityPolicy, want.PriorityGroups, want.PinnedTTL
	c, err = b.js.UpdateConsumer(ctx, stream, upd)
	if err != nil {
		return nil, fmt.Errorf("jetbus: update consumer %s of %s: %w", want.Durable, topic, retry.Opaque(err))
	}
	return c, nil
}

// createConsumerAt creates a consumer whose first delivery is stream sequence seq. It is
// created paused, reset to seq and resumed, so no client can pull from it before the reset.
func (b *Bus) createConsumerAt(ctx context.Context, stream string, cfg natsjs.ConsumerConfig, seq uint64) error {
	if seq <= 1 {
		_, err := b.js.CreateConsumer(ctx, stream, cfg)
		return wrapConsumerErr(cfg.Durable, err)
	}
	until := time.Now().Add(time.Hour)
	cfg.PauseUntil = &until
	if _, err := b.js.CreateConsumer(ctx, stream, cfg); err != nil {
		return wrapConsumerErr(cfg.Durable, err)
	}
	if err := b.resetConsumer(ctx, stream, cfg.Durable, seq); err != nil {
		return err
	}
	err := retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		_, err := b.js.ResumeConsumer(ctx, stream, cfg.Durable)
		return err
	})
	if err != nil {
		return fmt.Errorf("jetbus: resume consumer %s: %w", cfg.Durable, err)
	}
	return nil
}

// resetConsumer makes stream sequence seq the consumer's next delivery; seq 0 means its ack
// floor + 1, which returns every unacknowledged delivery to the consumer, in order. The
// consumer sequence starts again at 1 with the next delivery (nats-server's reset sets it so,
// whatever the stream sequence).
func (b *Bus) resetConsumer(ctx context.Context, stream, name string, seq uint64) error {
	_, err := b.resetConsumerInfo(ctx, stream, name, seq)
	return err
}

// resetConsumerInfo is resetConsumer returning the consumer's state as the reset left it.
//
// A replicated consumer is reset twice while it is paused (pauseForReset): the first reset
// empties its pending set, so that nothing can propose an entry from the state before the
// reset while the second one is committed (neither a delivery nor an InProgress or a
// delayed nak, which a pause alone does not stop), and the second one wipes whatever the
// entries proposed during the first one left in the replicas' stored state.
func (b *Bus) resetConsumerInfo(ctx context.Context, stream, name string, seq uint64) (*natsjs.ConsumerInfo, error) {
	p, err := b.pauseForReset(ctx, stream, name)
	if err != nil {
		return nil, fmt.Errorf("jetbus: position consumer %s at %d: %w", name, seq, err)
	}
	defer p.resume()
	// A reset after the pause ends would race deliveries again: the resets are bounded by
	// what is left of it.
	ctx, cancel := p.bound(ctx)
	defer cancel()
	info, err := b.resetOnce(ctx, stream, name, seq)
	if err == nil && p.active {
		info, err = b.resetOnce(ctx, stream, name, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("jetbus: position consumer %s at %d: %w", name, seq, err)
	}
	return info, nil
}

func (b *Bus) resetOnce(ctx context.Context, stream, name string, seq uint64) (*natsjs.ConsumerInfo, error) {
	var info natsjs.ConsumerInfo
	err := retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		var resp *natsjs.ConsumerResetResponse
		var err error
		if seq == 0 {
			resp, err = b.js.ResetConsumer(ctx, stream, name)
		} else {
			resp, err = b.js.ResetConsumerToSequence(ctx, stream, name, seq)
		}
		if err == nil && resp != nil && resp.ConsumerInfo != nil {
			info = *resp.ConsumerInfo
		}
		return err
	})
	return &info, err
}

// resetPause is how long a replicated consumer is paused for a reset (pauseForReset): the
// reset is answered within milliseconds, and the pause is lifted then. It bounds how long
// a consumer stays paused when the process that paused it dies before lifting the pause.
const resetPause = 15 * time.Second

// A pause taken for a reset.
type pause struct {
	b            *Bus
	stream, name string
	// active: this reset paused the consumer (a replicated consumer, not paused for
	// longer by someone else), until then (the server's clock). seen is when the consumer
	// reported itself paused (this process's clock).
	active bool
	until  time.Time
	seen   time.Time
}

// pauseForReset pauses a replicated consumer for a reset; resume lifts the pause.
//
// nats-server applies a replicated consumer's reset only once its raft group has committed
// it, and until then the leader goes on delivering from its state before the reset. Those
// deliveries are committed after the reset and leave the replicas' stored state past
// messages that the reset made pending again but that are not recorded as pending: the
// leader itself goes on from its own state, but a leader elected soon after (a node
// restart, a leader change) resumes from the stored state and never delivers those messages
// again, and its ack floor moves past them. A consumer that is paused delivers nothing.
// (make soak: TestResetDuringLeaderChangesLosesNothing; TestResetIsAppliedWhilePaused
// checks the pause.)
//
// The pause is asked of the meta leader and answered before the consumer's leader applies
// it, so this waits until the consumer reports itself paused. A consumer with no replicas
// has no raft group and is reset at once: it is not paused. A consumer paused for longer
// than a reset's pause (createConsumerAt's, an operator's) is left as it is: it delivers
// nothing during the reset either. A shorter pause is taken for one left by a process that
// stopped in the middle of a reset, and replaced.
func (b *Bus) pauseForReset(ctx context.Context, stream, name string) (*pause, error) {
	p := &pause{b: b, stream: stream, name: name}
	info, err := b.consumerInfo(ctx, stream, name)
	if err != nil {
		return p, err
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) == 0 || (info.Paused && info.PauseRemaining > resetPause) {
		return p, nil
	}
	// The server compares the pause with its own clock: the time is taken from its answer.
	// It also tells this pause from another reset's (resume).
	now := info.TimeStamp
	if now.IsZero() {
		now = time.Now()
	}
	p.active, p.until = true, now.Add(resetPause)
	// A consumer already paused (a pause left by a reset that stopped halfway, or an
	// operator's shorter one) reports itself paused before this pause is applied: only its
	// own end tells that this one is. Taking the old one for it, the reset went on before
	// the new pause was applied, and resume, not finding it, left the consumer paused.
	replacing := info.Paused
	err = retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		_, err := b.js.PauseConsumer(ctx, stream, name, p.until)
		return err
	})
	if err != nil {
		p.resume() // it may have been applied all the same
		return p, fmt.Errorf("pause for the reset: %w", err)
	}
	// Within a third of the pause, so that most of it is left for the reset.
	wait, cancel := context.WithTimeout(ctx, resetPause/3)
	defer cancel()
	for {
		info, err := b.consumerInfo(wait, stream, name)
		if err == nil && info.Paused && (!replacing || p.applied(info)) {
			p.seen = time.Now()
			return p, nil
		}
		select {
		case <-wait.Done():
			p.resume()
			return p, fmt.Errorf("the consumer did not pause for the reset: %w", context.Cause(wait))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// bound returns ctx ending, at the latest, well before the pause ends.
func (p *pause) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !p.active {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, p.seen.Add(resetPause/2))
}

// resume lifts the pause if it is still this reset's: a reset of the same consumer by
// another process (a release and a take-over at once) may have replaced it with its own,
// which that reset lifts when it is done.
func (p *pause) resume() {
	if !p.active {
		return
	}
	p.active = false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		info, err := p.b.consumerInfo(ctx, p.stream, p.name)
		if err != nil {
			return err
		}
		if !p.applied(info) {
			return nil
		}
		_, err = p.b.js.ResumeConsumer(ctx, p.stream, p.name)
		return err
	})
	if err != nil {
		p.b.opts.logger.Warn("resuming a consumer after its reset failed: it resumes when its pause ends", "stream", p.stream, "consumer", p.name, "until", p.until, "err", err)
	}
}

// applied reports whether the consumer's pause is this reset's.
func (p *pause) applied(info *natsjs.ConsumerInfo) bool {
	u := info.Config.PauseUntil
	return u != nil && u.Equal(p.until)
}

func (b *Bus) consumerInfo(ctx context.Context, stream, name string) (*natsjs.ConsumerInfo, error) {
	var info *natsjs.ConsumerInfo
	err := retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		c, err := b.js.Consumer(ctx, stream, name)
		if err != nil {
			return err
		}
		info = c.CachedInfo()
		return nil
	})
	return info, err
}

func wrapConsumerErr(name string, err error) error {
	if err == nil || errors.Is(err, natsjs.ErrConsumerExists) {
		return err
	}
	return fmt.Errorf("jetbus: create consumer %s: %w", name, err)
}

// resolve returns the first stream sequence to deliver for a position in topic.
func (b *Bus) resolve(ctx context.Context, topic string, pos jetbus.Position) (uint64, error) {
	stream := jetbus.StreamName(topic)
	switch pos.Kind {
	case jetbus.PositionEarliest:
		return 1, nil
	case jetbus.PositionAfterSeq:
		return pos.Seq + 1, nil
	}
	s, err := b.js.Stream(ctx, stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return 0, fmt.Errorf("%w: %s", jetbus.ErrTopicNotFound, topic)
	} else if err != nil {
		return 0, fmt.Errorf("jetbus: topic %s: %w", topic, retry.Opaque(err))
	}
	last := s.CachedInfo().State.LastSeq
	switch pos.Kind {
	case jetbus.PositionLatest:
		return last + 1, nil
	case jetbus.PositionTime:
		seq, found, err := b.firstSeqFrom(ctx, stream, pos.Time, nil)
		if err != nil || !found {
			return last + 1, err
		}
		return seq, nil
	case jetbus.PositionAfterID:
		if seq, ok := foreignSeq(stream, pos.ID); ok {
			return seq + 1, nil
		}
		from := time.Time{}
		if id, err := uuidTime(pos.ID); err == nil {
			from = id.Add(-time.Minute) // publisher and server clocks may differ
		}
		seq, found, err := b.firstSeqFrom(ctx, stream, from, func(m natsjs.Msg) bool {
			return m.Headers().Get(jetbus.HeaderMsgID) == pos.ID
		})
		if err != nil {
			return 0, err
		}
		if !found {
			return 0, fmt.Errorf("%w: %s in topic %s", jetbus.ErrEventNotFound, pos.ID, topic)
		}
		return seq + 1, nil
	}
	return 0, fmt.Errorf("%w: position kind %d", jetbus.ErrInvalidOption, pos.Kind)
}

// firstSeqFrom scans stream from time `from` (zero: the start), reading headers only, and
// returns the sequence of the first message that match accepts (nil: any).
func (b *Bus) firstSeqFrom(ctx context.Context, stream string, from time.Time, match func(natsjs.Msg) bool) (uint64, bool, error) {
	cfg := natsjs.OrderedConsumerConfig{HeadersOnly: true}
	if !from.IsZero() {
		cfg.DeliverPolicy = natsjs.DeliverByStartTimePolicy
		cfg.OptStartTime = &from
	}
	var seq uint64
	err := streamscan.Scan(ctx, b.js, stream, cfg, func(m natsjs.Msg, meta *natsjs.MsgMetadata) bool {
		if match == nil || match(m) {
			seq = meta.Sequence.Stream
			return false
		}
		return true
	})
	if err != nil {
		return 0, false, fmt.Errorf("jetbus: %w", retry.Opaque(err))
	}
	return seq, seq != 0, nil
}
