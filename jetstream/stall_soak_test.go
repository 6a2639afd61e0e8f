//go:build soak

package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestBacklogReadsDoNotStall (make soak): groups read a backlog of 60,000 events one after
// the other, with pull windows of 2, 64 and up to 1,000 events, and no delivery may wait 5 s
// or more after the one before it. nats.go's iterator can wait for a pull request it never
// sent (wake.go): without the wake, the first read stood still for two heartbeats (10.1 s)
// with `make test` running beside it (with the first form of the wake, two reads of twelve
// were woken, gaps of 0.5 s). On an idle machine it seldom stalls: this test fails without
// the wake only under outside load.
func TestBacklogReadsDoNotStall(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	const n = 60000
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "backlog"}))
	for i := range n {
		_, err := b.PublishAsync(ctx, "backlog", i)
		require.NoError(t, err)
	}
	select {
	case <-b.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the backlog was not stored")
	}
	for r := range 12 {
		inFlight := []int{2, 64, 1000}[r%3]
		var mu sync.Mutex
		var last time.Time // the first delivery's wait is the subscription's start
		got, worst := 0, time.Duration(0)
		done := make(chan struct{})
		sub, err := b.Subscribe(ctx, "backlog", fmt.Sprint("g", r), func(context.Context, *jetbus.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			if !last.IsZero() {
				worst = max(worst, now.Sub(last))
			}
			last = now
			if got++; got == n {
				close(done)
			}
			return nil
		}, jetbus.FromEarliest(), jetbus.MaxInFlight(inFlight), jetbus.BatchSize(inFlight))
		require.NoError(t, err)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("read %d: not all events delivered", r)
		}
		sub.Stop()
		t.Logf("read %d, window %d: longest wait between deliveries %v, %d wakes", r, inFlight, worst, jbjs.PullWakes(sub))
		require.Less(t, worst, 5*time.Second, "read %d stood still", r)
	}
}
