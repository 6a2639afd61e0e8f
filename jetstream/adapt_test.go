package jetstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestPullWindowFollowsTheHandler: a handler that is fast at first lets the pull window grow
// to MaxInFlight; when it then slows down, the window shrinks before the events it had
// buffered outlive the ack timeout (unordered: their ack timeout restarts), so none is
// delivered twice.
func TestPullWindowFollowsTheHandler(t *testing.T) {
	t.Run("ordered", func(t *testing.T) { testPullWindowFollowsTheHandler(t) })
	t.Run("unordered", func(t *testing.T) { testPullWindowFollowsTheHandler(t, jetbus.Unordered()) })
}

func testPullWindowFollowsTheHandler(t *testing.T, opts ...jetbus.SubscribeOption) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "work"}))
	const fast, slow = 3000, 60
	for i := range fast + slow {
		_, err := b.PublishAsync(ctx, "work", map[string]int{"n": i})
		require.NoError(t, err)
	}
	<-b.PublishAsyncComplete()

	var mu sync.Mutex
	seen := map[uint64]int{}
	var redelivered []uint64
	done := make(chan struct{})
	sub, err := b.Subscribe(ctx, "work", "g", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		seen[d.Seq]++
		if d.Attempt > 1 {
			redelivered = append(redelivered, d.Seq)
		}
		n := len(seen)
		mu.Unlock()
		if n > fast {
			time.Sleep(20 * time.Millisecond) // the handler's own work, slower now
		}
		if n == fast+slow {
			close(done)
		}
		return nil
	}, append(opts, jetbus.FromEarliest(), jetbus.AckTimeout(time.Second), jetbus.MaxInFlight(1000))...)
	require.NoError(t, err)
	defer sub.Stop()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every event was handled")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, redelivered, "events delivered a second time after their ack timeout")
	for seq, n := range seen {
		assert.Equal(t, 1, n, "event %d handled %d times", seq, n)
	}
}
