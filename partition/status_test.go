package partition_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// TestStatusAndStop runs two members, checks what Status reports, and checks that stopping
// (Drain, then a cancelled context) releases every lease and leaves the group.
func TestStatusAndStop(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 8}))
	js := admin.JetStream()

	_, err := partition.Status(ctx, js, "orders", "nobody")
	require.ErrorIs(t, err, jetbus.ErrGroupNotFound)

	start := func(ctx context.Context, id string) *partition.Subscriber {
		bus := embeddedtest.Bus(t, s.ClientURL())
		sub, err := partition.Subscribe(ctx, bus, bus.JetStream(), partition.Config{Topic: "orders", Group: "g", MemberID: id, TTL: time.Second, Version: "1.0"}, noop)
		require.NoError(t, err)
		return sub
	}
	a := start(ctx, "a")
	bctx, cancelB := context.WithCancel(ctx)
	b := start(bctx, "b")

	var st *partition.GroupStatus
	require.Eventually(t, func() bool {
		st, err = partition.Status(ctx, js, "orders", "g")
		return err == nil && len(st.Members) == 2 && st.Balanced()
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 8, st.Partitions)
	assert.Equal(t, time.Second, st.TTL)
	assert.Equal(t, []string{"a", "b"}, st.Assignment.Members)
	assert.Equal(t, "1.0", st.Members[0].Version)
	assert.NotEmpty(t, st.Members[0].Host)
	for p, l := range st.Leases {
		assert.Equal(t, partition.LeaseHeld, l.State, "partition %d", p)
		assert.Equal(t, st.Assignment.Owners[p], l.Owner, "partition %d", p)
	}
	require.Eventually(t, func() bool { return len(a.Owned()) == 4 && len(b.Owned()) == 4 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, partition.Owned(st.Assignment.Owners, "a"), a.Owned())

	// a drains: b takes everything.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, a.Drain(dctx))
	assert.Empty(t, a.Owned())
	require.Eventually(t, func() bool {
		st, err = partition.Status(ctx, js, "orders", "g")
		return err == nil && len(st.Members) == 1 && st.Balanced() && len(b.Owned()) == 8
	}, 10*time.Second, 10*time.Millisecond)

	// b's context ends: it stops, releases its leases and leaves.
	cancelB()
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b did not stop on context cancel")
	}
	assert.NoError(t, b.Err())
	st, err = partition.Status(ctx, js, "orders", "g")
	require.NoError(t, err)
	assert.Empty(t, st.Members)
	for p, l := range st.Leases {
		assert.Equal(t, partition.LeaseReleased, l.State, "partition %d", p)
	}
	assert.False(t, st.Balanced())
}

// TestSubscriberStopsWhenConnectionCloses checks that a member whose connection is closed
// stops by itself with jetbus.ErrClosed.
func TestSubscriberStopsWhenConnectionCloses(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	nc := bus.Conn()
	require.NoError(t, bus.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "orders", Partitions: 2}))
	sub, err := partition.Subscribe(t.Context(), bus, bus.JetStream(), partition.Config{Topic: "orders", Group: "g", TTL: time.Second}, noop)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(sub.Owned()) == 2 }, 5*time.Second, 10*time.Millisecond)
	nc.Close()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscriber did not stop after its connection closed")
	}
	assert.ErrorIs(t, sub.Err(), jetbus.ErrClosed)
	assert.NoError(t, sub.Stop())
}

// zeroPartitions is a Bus whose topic reports no partitions.
type zeroPartitions struct{ *jbjs.Bus }

func (zeroPartitions) Partitions(context.Context, string) (int, error) { return 0, nil }

// plainBus is a Bus without the PartitionSubscriber capability.
type plainBus struct{ jetbus.Bus }

func TestSubscribeBadInput(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 2}))
	js := bus.JetStream()
	cfg := partition.Config{Topic: "orders", Group: "g"}
	cases := []struct {
		name string
		c    jetbus.Bus
		cfg  partition.Config
		h    jetbus.Handler
		opts []jetbus.SubscribeOption
		want error
	}{
		{"bad topic", bus, partition.Config{Topic: "Orders", Group: "g"}, noop, nil, jetbus.ErrInvalidTopic},
		{"bad group", bus, partition.Config{Topic: "orders", Group: "a b"}, noop, nil, jetbus.ErrInvalidGroup},
		{"TTL too short", bus, partition.Config{Topic: "orders", Group: "g", TTL: time.Millisecond}, noop, nil, partition.ErrInvalidConfig},
		{"bad member ID", bus, partition.Config{Topic: "orders", Group: "g", MemberID: "a b"}, noop, nil, partition.ErrInvalidConfig},
		{"nil handler", bus, cfg, nil, nil, jetbus.ErrInvalidOption},
		{"nil bus", nil, cfg, noop, nil, partition.ErrInvalidConfig},
		{"bus without partition subscriptions", plainBus{bus}, cfg, noop, nil, jetbus.ErrInvalidOption},
		{"bad option", bus, cfg, noop, []jetbus.SubscribeOption{jetbus.BatchSize(0)}, jetbus.ErrInvalidOption},
		{"fan-in", bus, cfg, noop, []jetbus.SubscribeOption{jetbus.FanIn("payments")}, jetbus.ErrInvalidOption},
		{"unordered", bus, cfg, noop, []jetbus.SubscribeOption{jetbus.Unordered()}, jetbus.ErrInvalidOption},
		{"unknown topic", bus, partition.Config{Topic: "nothing", Group: "g"}, noop, nil, jetbus.ErrTopicNotFound},
		{"no partitions", zeroPartitions{bus}, cfg, noop, nil, partition.ErrNoPartitions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := partition.Subscribe(ctx, tc.c, js, tc.cfg, tc.h, tc.opts...)
			if sub != nil {
				_ = sub.Stop()
			}
			assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
		})
	}
}
