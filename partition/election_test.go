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

// TestOpenAndSubscribeThroughMetaLeaderRestart opens a Bus and creates a topic, then
// subscribes a group, each while the cluster's meta leader and one more node are down (no
// quorum: JetStream cannot answer at all) and come back: each call asks again until the
// cluster answers, and the subscription then handles an event. With the cluster still down,
// a call whose context ends returns one error that says so.
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
	c.Restart(leader)
	c.Restart(other)

	ctx, cancelAll := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancelAll()
	// through runs fn while the meta leader and one more node are down, and brings them back
	// once fn started: fn's first requests cannot be answered.
	through := func(what string, fn func() error) {
		t.Helper()
		leader := c.MetaLeader()
		require.GreaterOrEqual(t, leader, 0)
		down := []int{leader, (leader + 1) % 3}
		for _, i := range down {
			c.Stop(i)
		}
		done := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			done <- fn()
		}()
		<-started
		for _, i := range down {
			c.Restart(i)
		}
		select {
		case err := <-done:
			require.NoError(t, err, what)
		case <-ctx.Done():
			t.Fatalf("%s did not finish after the cluster came back", what)
		}
	}

	var bus *jbjs.Bus
	through("open and create the topic", func() error {
		var err error
		if bus, err = jbjs.Open(ctx, embeddedtest.Connect(t, c.URLs())); err != nil {
			return err
		}
		return bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 2, Replicas: 3})
	})
	defer bus.Close()
	handled := make(chan string, 1)
	var sub *partition.Subscriber
	through("subscribe", func() error {
		var err error
		sub, err = partition.Subscribe(ctx, bus, bus.JetStream(),
			partition.Config{Topic: "orders", Group: "billing", Replicas: 3, Logger: embeddedtest.Logger(t)},
			func(_ context.Context, d *jetbus.Delivery) error {
				select {
				case handled <- d.ID:
				default:
				}
				return nil
			}, jetbus.FromEarliest())
		return err
	})
	defer sub.Stop()

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
