package partition_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// TestFencedResumesAfterLeaseTTL: with Config.Fenced a crashed owner's partition is taken over
// once its lease expired, not once its deliveries timed out (the ack timeout is an hour here),
// and the events it held come first, in order.
func TestFencedResumesAfterLeaseTTL(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	admin := embeddedtest.Bus(t, s.ClientURL())
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 1}))
	var want []uint64
	for i := range 5 {
		ev, err := admin.Publish(ctx, "orders", i, jetbus.WithKey("k"))
		require.NoError(t, err)
		want = append(want, ev.Seq)
	}
	opts := []jetbus.SubscribeOption{jetbus.FromEarliest(), jetbus.AckTimeout(time.Hour)}
	cfg := partition.Config{Topic: "orders", Group: "g", TTL: time.Second, Fenced: true, Logger: embeddedtest.Logger(t)}

	// Member a takes the first event and never finishes it; then its connection is gone (a
	// crash: no leave, no release).
	busA := embeddedtest.Bus(t, s.ClientURL())
	held := make(chan uint64, 8)
	release := make(chan struct{})
	defer close(release)
	cfgA := cfg
	cfgA.MemberID = "a"
	_, err := partition.Subscribe(ctx, busA, busA.JetStream(), cfgA, func(_ context.Context, d *jetbus.Delivery) error {
		held <- d.Seq
		<-release
		return nil
	}, opts...)
	require.NoError(t, err)
	select {
	case seq := <-held:
		require.Equal(t, want[0], seq)
	case <-time.After(30 * time.Second):
		t.Fatal("member a got no event")
	}
	busA.Conn().Close()

	var mu sync.Mutex
	var got []uint64
	busB := embeddedtest.Bus(t, s.ClientURL())
	cfgB := cfg
	cfgB.MemberID = "b"
	_, err = partition.Subscribe(ctx, busB, busB.JetStream(), cfgB, func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d.Seq)
		return nil
	}, opts...)
	require.NoError(t, err)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	require.Eventually(t, func() bool { return count() >= len(want) }, 30*time.Second, 20*time.Millisecond,
		"member b handles the partition long before the hour-long ack timeout")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, want, slices.Compact(got), "the held event first, then the rest in order")
}
