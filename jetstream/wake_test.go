package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// An ordered pull whose Next waits without a delivery is woken (wake.go: nats.go's iterator
// can wait there for a pull request it never sent), WakesPerSpell times in a quiet spell and
// then no more, and the pull goes on: an event published after the wake has come to rest is
// delivered to the same subscription, and rearms it (the next quiet spell is woken too).
func TestIdlePullIsWokenAndGoesOn(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "idle"}))
	got := make(chan string, 10)
	sub, err := b.Subscribe(ctx, "idle", "g", func(_ context.Context, d *jetbus.Delivery) error {
		got <- d.ID
		return nil
	})
	require.NoError(t, err)
	defer sub.Stop()

	spell := uint64(jbjs.WakesPerSpell())
	require.Eventually(t, func() bool { return jbjs.PullWakes(sub) >= spell }, 10*time.Second, 10*time.Millisecond,
		"an idle pull's Next was not woken %d times", spell)
	// Resting: no more wakes while the partition stays idle (a spell's intervals add up to
	// under 2 s).
	require.Never(t, func() bool { return jbjs.PullWakes(sub) > spell }, 2500*time.Millisecond, 50*time.Millisecond,
		"the wake went on waking an idle pull")
	for i := range 2 {
		e, err := b.Publish(ctx, "idle", i)
		require.NoError(t, err)
		select {
		case id := <-got:
			require.Equal(t, e.ID, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not delivered after the pull was woken", i)
		}
		before := jbjs.PullWakes(sub)
		require.Eventually(t, func() bool { return jbjs.PullWakes(sub) > before }, 10*time.Second, 10*time.Millisecond,
			"the quiet spell after event %d was not woken", i)
	}
}
