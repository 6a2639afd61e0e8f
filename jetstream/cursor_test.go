package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestCursorWhileConsumersAreCreated: a Cursor read racing the creation of a group's
// consumers never reports a partition as caught up while its events are undelivered. The
// server lists a consumer a moment before it has counted its pending events; a lag of zero
// read in that moment made a rebuild switch to a view still empty.
func TestCursorWhileConsumersAreCreated(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		topic string
		keyed bool
	}{{"plain", false}, {"keyed", true}} {
		require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: tc.topic, Partitions: 2, Keyed: tc.keyed}))
		for i := range 3 {
			_, err := b.Publish(ctx, tc.topic, i, jetbus.WithKey("k"))
			require.NoError(t, err)
		}
		for round := range 60 {
			group := fmt.Sprintf("g%d", round)
			set := make(chan error, 1)
			// Positions every partition consumer of the group, creating them.
			go func() { set <- b.SetCursor(ctx, tc.topic, group, jetbus.Earliest()) }()
			for {
				c, err := b.Cursor(ctx, tc.topic, group)
				if err == nil && len(c.Partitions) == 2 {
					require.Equal(t, uint64(3), c.Lag(), "%s round %d: %+v", tc.topic, round, c.Partitions)
					break
				}
				if err == nil {
					require.LessOrEqual(t, c.Lag(), uint64(3))
					require.True(t, c.Lag() == 3 || len(c.Partitions) == 1 && c.Lag() == 0,
						"%s round %d: %+v", tc.topic, round, c.Partitions)
				}
				require.NoError(t, ctx.Err())
			}
			require.NoError(t, <-set)
		}
	}
}

// TestCursorOldest: a partition's Oldest is the store time of the first event after its ack
// floor, read from the stream, for plain and keyed topics; zero once every event is
// acknowledged.
func TestCursorOldest(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, keyed := range []bool{false, true} {
		topic := fmt.Sprintf("oldest%v", keyed)
		require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic, Partitions: 1, Keyed: keyed}))
		var evs []*jetbus.Event
		for i := range 3 {
			ev, err := b.Publish(ctx, topic, map[string]int{"n": i}, jetbus.WithKey(fmt.Sprintf("k%d", i)))
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		str, err := b.JetStream().Stream(ctx, jetbus.StreamName(topic))
		require.NoError(t, err)
		second, err := str.GetMsg(ctx, evs[1].Seq)
		require.NoError(t, err)

		acked := make(chan uint64, 3)
		sub, err := b.Subscribe(ctx, topic, "g", func(_ context.Context, d *jetbus.Delivery) error {
			acked <- d.Seq
			return nil
		}, jetbus.FromEarliest(), jetbus.ManualAck())
		require.NoError(t, err)
		for range 3 {
			<-acked
		}
		require.NoError(t, b.Ack(ctx, topic, "g", evs[0].ID))
		require.True(t, embeddedtest.Poll(10*time.Second, 10*time.Millisecond, func() bool {
			c, err := b.Cursor(ctx, topic, "g")
			return err == nil && c.Partitions[0].AckFloor == evs[0].Seq
		}))
		c, err := b.Cursor(ctx, topic, "g")
		require.NoError(t, err)
		require.True(t, second.Time.Equal(c.Partitions[0].Oldest), "keyed %v: oldest %s, the second event stored %s", keyed, c.Partitions[0].Oldest, second.Time)
		require.Greater(t, c.Partitions[0].LagSeconds(second.Time.Add(time.Minute)), 59.0)

		require.NoError(t, b.AckBatch(ctx, topic, "g", evs[1].ID, evs[2].ID))
		require.True(t, embeddedtest.Poll(10*time.Second, 10*time.Millisecond, func() bool {
			c, err := b.Cursor(ctx, topic, "g")
			return err == nil && c.Lag() == 0 && c.Partitions[0].Oldest.IsZero() && c.Partitions[0].LagSeconds(time.Now()) == 0
		}), "nothing left: no oldest")
		require.NoError(t, sub.Stop())
	}
}
