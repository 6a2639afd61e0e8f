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
