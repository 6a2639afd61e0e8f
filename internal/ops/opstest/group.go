// Package opstest sets up a consumer group in a known, stable state for the tests of what
// operators see (ops.Collect, /v1/ops/status, bridge status): two partitioned members, events
// acknowledged on every partition but one, whose handler holds its deliveries, so owners,
// leases and lag are known and do not move while a test reads them.
package opstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// Group is a group "billing" of topic "orders" (4 partitions) with two members.
type Group struct {
	Topic, Group string
	Partitions   int
	// Held is the partition whose handler holds its deliveries; HeldEvents how many it got.
	Held, HeldEvents int
	Bus              *jetstream.Bus
}

// StartGroup creates the topic (unless it exists), starts two members, waits until they
// share the partitions, publishes events to every partition, and waits until every partition
// but Held has acknowledged all of them and Held has all of its own delivered and unacked.
// The members stop when the test ends.
func StartGroup(t testing.TB, url string) *Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := &Group{Topic: "orders", Group: "billing", Partitions: 4, Held: 1}
	g.Bus = embeddedtest.Bus(t, url)
	require.NoError(t, g.Bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: g.Topic, Partitions: g.Partitions}))

	release := make(chan struct{})
	handler := func(ctx context.Context, d *jetbus.Delivery) error {
		if d.Partition == g.Held {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		return nil
	}
	var subs []*partition.Subscriber
	for i := range 2 {
		// Not ctx: the members outlive StartGroup.
		s, err := partition.Subscribe(context.Background(), g.Bus, g.Bus.JetStream(),
			partition.Config{Topic: g.Topic, Group: g.Group, MemberID: fmt.Sprintf("member-%d", i), TTL: 2 * time.Second},
			handler, jetbus.FromEarliest())
		require.NoError(t, err)
		subs = append(subs, s)
	}
	t.Cleanup(func() {
		close(release)
		for _, s := range subs {
			_ = s.Stop()
		}
	})
	require.Eventually(t, func() bool {
		st, err := partition.Status(ctx, g.Bus.JetStream(), g.Topic, g.Group)
		return err == nil && st.Balanced() && len(st.Members) == 2
	}, 30*time.Second, 20*time.Millisecond, "members share the partitions")

	for k := 0; k < 40; k++ {
		ev, err := g.Bus.Publish(ctx, g.Topic, map[string]int{"n": k}, jetbus.WithKey(fmt.Sprintf("k%d", k)))
		require.NoError(t, err)
		if ev.Partition == g.Held {
			g.HeldEvents++
		}
	}
	require.Positive(t, g.HeldEvents)
	require.Eventually(t, func() bool {
		c, err := g.Bus.Cursor(ctx, g.Topic, g.Group)
		if err != nil || len(c.Partitions) != g.Partitions {
			return false
		}
		for _, p := range c.Partitions {
			want := 0
			if p.Partition == g.Held {
				want = g.HeldEvents
			}
			if p.Pending != 0 || p.AckPending != want {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "settled: partition %d holds its events", g.Held)
	return g
}

// Truth reads the group as partition.Status and the Bus's Cursor report it.
func (g *Group) Truth(t testing.TB) (*partition.GroupStatus, *jetbus.Cursor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := partition.Status(ctx, g.Bus.JetStream(), g.Topic, g.Group)
	require.NoError(t, err)
	c, err := g.Bus.Cursor(ctx, g.Topic, g.Group)
	require.NoError(t, err)
	return st, c
}
