package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// TestOpenAndSubscribeThroughMetaLeaderRestart opens a Bus, creates a topic and subscribes a
// group while the cluster's meta leader and one more node are down (no quorum: JetStream
// cannot answer at all) and come back: each call asks again until the cluster answers, and
// the subscription then handles an event. With the cluster still down, a call whose context
// ends returns one error that says so.
func TestOpenAndSubscribeThroughMetaLeaderRestart(t *testing.T) {
	c := embeddedtest.Cluster(t, 3)
	leader := c.MetaLeader()
	require.GreaterOrEqual(t, leader, 0)
	up := (leader + 1) % 3
	other := (leader + 2) % 3
	url := c.Servers()[up].ClientURL()
	c.Stop(leader)
	c.Stop(other)

	// With no quorum and a short context: one clear error.
	short, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err := jbjs.Open(short, embeddedtest.Connect(t, url))
	cancel()
	require.ErrorContains(t, err, "jetstream not available (asked again until the context ended)")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	type subscribed struct {
		bus *jbjs.Bus
		sub *partition.Subscriber
		err error
	}
	handled := make(chan string, 1)
	done := make(chan subscribed, 1)
	started := make(chan struct{})
	ctx, cancelAll := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancelAll()
	go func() {
		close(started)
		var r subscribed
		defer func() { done <- r }()
		if r.bus, r.err = jbjs.Open(ctx, embeddedtest.Connect(t, url)); r.err != nil {
			return
		}
		if r.err = r.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 2, Replicas: 3}); r.err != nil {
			return
		}
		r.sub, r.err = partition.Subscribe(ctx, r.bus, r.bus.JetStream(),
			partition.Config{Topic: "orders", Group: "billing", Replicas: 3, Logger: embeddedtest.Logger(t)},
			func(_ context.Context, d *jetbus.Delivery) error {
				select {
				case handled <- d.ID:
				default:
				}
				return nil
			}, jetbus.FromEarliest())
	}()
	<-started
	c.Restart(leader)
	c.Restart(other)

	var r subscribed
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("open, topic and subscribe did not finish after the cluster came back")
	}
	require.NoError(t, r.err)
	defer r.bus.Close()
	defer r.sub.Stop()

	pub := embeddedtest.Bus(t, c.URLs())
	ev, err := pub.Publish(ctx, "orders", map[string]int{"n": 1}, jetbus.WithKey("k"))
	require.NoError(t, err)
	select {
	case id := <-handled:
		require.Equal(t, ev.ID, id)
	case <-ctx.Done():
		t.Fatal("the subscription handled nothing")
	}
}
