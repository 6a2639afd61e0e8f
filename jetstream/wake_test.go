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
// can wait there for a pull request it never sent), and the pull goes on: events published
// after the wakes are delivered to the same subscription, and the next quiet spell is woken
// too.
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

	require.Eventually(t, func() bool { return jbjs.PullWakes(sub) >= 1 }, 10*time.Second, 10*time.Millisecond,
		"an idle pull's Next was never woken")
	for i := range 3 {
		e, err := b.Publish(ctx, "idle", i)
		require.NoError(t, err)
		select {
		case id := <-got:
			require.Equal(t, e.ID, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not delivered after the pull was woken", i)
		}
		// The next quiet spell is woken too: the wake was re-armed by the delivery.
		before := jbjs.PullWakes(sub)
		require.Eventually(t, func() bool { return jbjs.PullWakes(sub) > before }, 10*time.Second, 10*time.Millisecond)
	}
}
