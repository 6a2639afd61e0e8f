package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// Cursor implements jetbus.Bus: the position of every partition consumer of the group.
func (b *Bus) Cursor(ctx context.Context, topic, group string) (*jetbus.Cursor, error) {
	n, err := b.checkNames(ctx, topic, group)
	if err != nil {
		return nil, err
	}
	c := &jetbus.Cursor{Topic: topic, Group: group}
	stream := jetbus.StreamName(topic)
	t, err := b.topics.get(ctx, topic)
	if err != nil {
		return nil, err
	}
	var str natsjs.Stream // looked up once, when a partition reads as caught up or behind
	getStream := func() (natsjs.Stream, error) {
		if str == nil {
			s, err := b.js.Stream(ctx, stream)
			if err != nil {
				return nil, err
			}
			str = s
		}
		return str, nil
	}
	lastSeq := func(filter string) (uint64, error) {
		str, err := getStream()
		if err != nil {
			return 0, err
		}
		m, err := str.GetLastMsgForSubject(ctx, filter)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return 0, nil
		} else if err != nil {
			return 0, err
		}
		return m.Sequence, nil
	}
	for p := range n {
		info, err := b.partitionInfo(ctx, stream, jetbus.ConsumerName(group, p), func() (uint64, error) { return lastSeq(t.filter(p)) })
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("jetbus: cursor of %s/%s: %w", topic, group, retry.Opaque(err))
		}
		pc := jetbus.PartitionCursor{
			Partition:  p,
			AckFloor:   info.AckFloor.Stream,
			Delivered:  info.Delivered.Stream,
			Pending:    info.NumPending,
			AckPending: info.NumAckPending,
		}
		if pc.Pending+uint64(pc.AckPending) > 0 {
			// The store time of the first event after the ack floor: one direct read. An
			// event gone meanwhile (acknowledged and removed, or aged out) leaves it zero.
			if str, err := getStream(); err == nil {
				if m, err := str.GetMsg(ctx, pc.AckFloor+1, natsjs.WithGetMsgSubject(t.filter(p))); err == nil {
					pc.Oldest = m.Time
				} else if !errors.Is(err, natsjs.ErrMsgNotFound) {
					return nil, fmt.Errorf("jetbus: cursor of %s/%s: oldest event: %w", topic, group, retry.Opaque(err))
				}
			} else {
				return nil, fmt.Errorf("jetbus: cursor of %s/%s: %w", topic, group, retry.Opaque(err))
			}
		}
		c.Partitions = append(c.Partitions, pc)
	}
	if len(c.Partitions) == 0 {
		return nil, fmt.Errorf("%w: %s in topic %s", jetbus.ErrGroupNotFound, group, topic)
	}
	return c, nil
}

// partitionInfo reads a partition consumer's info. The server lists a consumer a moment before
// it has counted the consumer's pending events (a create racing this read, a new consumer
// leader), and reads no pending events then: a partition read as caught up is checked against
// its last event in the stream, and read again while the two disagree. An event stored after
// the read makes them disagree too; it is counted once read again.
func (b *Bus) partitionInfo(ctx context.Context, stream, name string, lastSeq func() (uint64, error)) (*natsjs.ConsumerInfo, error) {
	var last uint64
	haveLast := false
	for attempt := 0; ; attempt++ {
		cons, err := b.js.Consumer(ctx, stream, name)
		if err != nil {
			return nil, err
		}
		info := cons.CachedInfo()
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return info, nil
		}
		if !haveLast {
			if last, err = lastSeq(); err != nil {
				return nil, err
			}
			haveLast = true
		}
		if last <= info.Delivered.Stream {
			return info, nil
		}
		if attempt >= 20 {
			// Still not counted: at least the last event is pending.
			info.NumPending = 1
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// SetCursor implements jetbus.Bus: every partition consumer of the group is reset so its next
// delivery is the first event at `to`; partitions the group never consumed get a consumer
// there. Members consuming the group continue from the new position; deliveries they hold
// from before are forgotten by the server (their acks do nothing).
func (b *Bus) SetCursor(ctx context.Context, topic, group string, to jetbus.Position) error {
	n, err := b.checkNames(ctx, topic, group)
	if err != nil {
		return err
	}
	seq, err := b.resolve(ctx, topic, to)
	if err != nil {
		return err
	}
	if seq == 0 {
		seq = 1
	}
	o, err := jetbus.ApplySubscribeOptions()
	if err != nil {
		return err
	}
	stream := jetbus.StreamName(topic)
	t, err := b.topics.get(ctx, topic)
	if err != nil {
		return err
	}
	// Looked up first: a reset is answered by the consumer itself, so a reset of a consumer
	// that does not exist gets no reply at all (not "not found"). A partition the group never
	// consumed gets a consumer of the group's order: unordered when the group's other
	// consumers are (a group without any is ordered, the default).
	exists := make([]bool, n)
	for p := range n {
		c, err := b.js.Consumer(ctx, stream, jetbus.ConsumerName(group, p))
		switch {
		case errors.Is(err, natsjs.ErrConsumerNotFound):
		case err != nil:
			return fmt.Errorf("jetbus: set cursor of %s/%s partition %d: %w", topic, group, p, retry.Opaque(err))
		default:
			exists[p] = true
			o.Unordered = o.Unordered || unorderedConsumer(&c.CachedInfo().Config)
		}
	}
	for p := range n {
		name := jetbus.ConsumerName(group, p)
		var err error
		if exists[p] {
			err = b.resetConsumer(ctx, stream, name, seq)
		} else {
			err = b.createConsumerAt(ctx, stream, b.consumerConfig(topic, t.filter(p), group, p, &o), seq)
			if errors.Is(err, natsjs.ErrConsumerExists) {
				err = b.resetConsumer(ctx, stream, name, seq)
			}
		}
		if err != nil {
			return fmt.Errorf("jetbus: set cursor of %s/%s partition %d: %w", topic, group, p, retry.Opaque(err))
		}
	}
	return nil
}

func (b *Bus) checkNames(ctx context.Context, topic, group string) (int, error) {
	if b.isClosed() {
		return 0, jetbus.ErrClosed
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return 0, err
	}
	if err := jetbus.ValidateGroup(group); err != nil {
		return 0, err
	}
	return b.topics.partitions(ctx, topic)
}

// uuidTime returns the time embedded in a UUIDv7.
func uuidTime(id string) (time.Time, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, err
	}
	if u.Version() != 7 {
		return time.Time{}, fmt.Errorf("not a UUIDv7")
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec), nil
}
