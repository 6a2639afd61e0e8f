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

// TestAckBatchAndInProgress: a ManualAck consumer that settles in batches keeps its
// deliveries alive past the ack timeout with InProgress, then acknowledges them all at once.
func TestAckBatchAndInProgress(t *testing.T) {
	t.Run("ordered", func(t *testing.T) { testAckBatchAndInProgress(t) })
	t.Run("unordered", func(t *testing.T) { testAckBatchAndInProgress(t, jetbus.Unordered()) })
}

func testAckBatchAndInProgress(t *testing.T, opts ...jetbus.SubscribeOption) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "batch"}))
	const n = 50
	for i := range n {
		_, err := b.Publish(ctx, "batch", map[string]int{"n": i})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var ids []string
	attempts := map[string]int{}
	sub, err := b.Subscribe(ctx, "batch", "g", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if attempts[d.ID] == 0 {
			ids = append(ids, d.ID)
		}
		attempts[d.ID]++
		return nil
	}, append(opts, jetbus.FromEarliest(), jetbus.ManualAck(), jetbus.AckTimeout(300*time.Millisecond))...)
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) == n }, 10*time.Second, 5*time.Millisecond)

	mu.Lock()
	held := append([]string(nil), ids...)
	mu.Unlock()
	deadline := time.Now().Add(time.Second) // three ack timeouts
	for time.Now().Before(deadline) {
		require.NoError(t, b.InProgress(ctx, "batch", "g", held...))
		time.Sleep(100 * time.Millisecond) // the interval a batch consumer would keep
	}
	err = b.AckBatch(ctx, "batch", "g", append(held, "no-such-event")...)
	assert.ErrorIs(t, err, jetbus.ErrUnknownEvent, "the unknown ID is reported")
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "batch", "g")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond, "every delivery acknowledged")
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		assert.Equal(t, 1, a, "%s delivered again: InProgress did not hold it", id)
	}
	assert.ErrorIs(t, b.AckBatch(ctx, "batch", "g", held[0]), jetbus.ErrUnknownEvent, "acked twice")
	assert.ErrorIs(t, b.InProgress(ctx, "batch", "g", held[0]), jetbus.ErrUnknownEvent)
}

// TestManualAckOfAnIDStoredTwice: an event ID published again after the topic's duplicate
// window is stored twice, and both deliveries may be pending at once (a batch holds them
// both); each settles one of them, oldest first, so that none is left to the ack timeout.
func TestManualAckOfAnIDStoredTwice(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "twice", DuplicateWindow: 100 * time.Millisecond}))
	first, err := b.Publish(ctx, "twice", map[string]int{"n": 1}, jetbus.WithID("same"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { // stored again once the window passed
		e, err := b.Publish(ctx, "twice", map[string]int{"n": 1}, jetbus.WithID("same"))
		return err == nil && e.Seq != first.Seq
	}, 10*time.Second, 50*time.Millisecond)

	for _, settle := range []struct {
		name string
		do   func(group string, ids []string) error
	}{
		{"AckBatch", func(group string, ids []string) error { return b.AckBatch(ctx, "twice", group, ids...) }},
		{"Ack", func(group string, ids []string) error {
			for _, id := range ids {
				if err := b.Ack(ctx, "twice", group, id); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(settle.name, func(t *testing.T) {
			group := "g-" + settle.name
			var mu sync.Mutex
			var ids []string
			sub, err := b.Subscribe(ctx, "twice", group, func(_ context.Context, d *jetbus.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				ids = append(ids, d.ID)
				return nil
			}, jetbus.FromEarliest(), jetbus.ManualAck(), jetbus.AckTimeout(time.Minute))
			require.NoError(t, err)
			defer sub.Stop()
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) >= 2 }, 10*time.Second, 5*time.Millisecond)
			mu.Lock()
			held := append([]string(nil), ids...)
			mu.Unlock()
			require.Equal(t, []string{"same", "same"}, held[:2])
			require.NoError(t, settle.do(group, held), "both deliveries were pending")
			require.Eventually(t, func() bool {
				c, err := b.Cursor(ctx, "twice", group)
				return err == nil && c.Lag() == 0
			}, 10*time.Second, 10*time.Millisecond, "both acknowledged, well before the ack timeout")
			assert.ErrorIs(t, b.AckBatch(ctx, "twice", group, "same"), jetbus.ErrUnknownEvent, "nothing more pending")
		})
	}
}
