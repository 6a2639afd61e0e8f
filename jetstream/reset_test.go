package jetstream_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestResetIsAppliedWhilePaused: a replicated consumer's reset (a take-over, a recovery of
// lost deliveries, a release, a cursor moved) is applied while the consumer is paused, and
// the pause is lifted after it. nats-server applies such a reset only once its raft group
// has committed it, and deliveries its leader makes meanwhile are committed after it: they
// leave the replicas' stored state past messages the reset made pending again, and a leader
// elected soon after never delivers those messages again. Paused, the leader makes none.
// The reset's answer carries the consumer's state when its leader applied it.
//
// The consumer is reset twice: the first reset empties its pending set, so that nothing can
// propose an entry from the state before it while the second one is committed (an
// InProgress or a delayed nak is not stopped by the pause), and the second one wipes what
// such entries left.
func TestResetIsAppliedWhilePaused(t *testing.T) {
	c := embeddedtest.Cluster(t, 3)
	ctx := t.Context()
	b := embeddedtest.Bus(t, c.URLs())
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "reset", Partitions: 1, Replicas: 3}))
	require.NoError(t, b.SetCursor(ctx, "reset", "g", jetbus.Earliest()))
	js, err := natsjs.New(embeddedtest.Connect(t, c.URLs()))
	require.NoError(t, err)
	stream, name := jetbus.StreamName("reset"), jetbus.ConsumerName("g", 0)
	paused := func() *natsjs.ConsumerInfo {
		t.Helper()
		cons, err := js.Consumer(ctx, stream, name)
		require.NoError(t, err)
		return cons.CachedInfo()
	}
	// The pause and its end are asked of the meta leader, which answers before the
	// consumer's leader applies them.
	resumed := func() bool {
		return embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool { return !paused().Paused })
	}

	t.Run("paused for the reset, resumed after", func(t *testing.T) {
		nc := embeddedtest.Connect(t, c.URLs())
		resets, err := nc.SubscribeSync("$JS.API.CONSUMER.RESET." + stream + "." + name)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		info, err := jbjs.ResetConsumer(ctx, b, "reset", "g", 0)
		require.NoError(t, err)
		assert.True(t, info.Paused, "the reset was applied while the consumer delivered")
		assert.True(t, resumed(), "the consumer was left paused")
		// Reset twice: an InProgress or a delayed nak proposed during the first reset,
		// which a pause does not stop, is wiped by the second one.
		require.NoError(t, nc.Flush())
		n, _, err := resets.Pending()
		require.NoError(t, err)
		assert.Equal(t, 2, n, "resets asked")
	})
	t.Run("a pause left by a reset that stopped halfway is lifted", func(t *testing.T) {
		_, err := js.PauseConsumer(ctx, stream, name, time.Now().Add(5*time.Second))
		require.NoError(t, err)
		require.True(t, embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool { return paused().Paused }))
		info, err := jbjs.ResetConsumer(ctx, b, "reset", "g", 0)
		require.NoError(t, err)
		assert.True(t, info.Paused)
		assert.True(t, resumed(), "the consumer was left paused")
	})
	t.Run("a longer pause is left as it is", func(t *testing.T) {
		until := time.Now().Add(time.Hour)
		_, err := js.PauseConsumer(ctx, stream, name, until)
		require.NoError(t, err)
		require.True(t, embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool { return paused().Paused }))
		info, err := jbjs.ResetConsumer(ctx, b, "reset", "g", 0)
		require.NoError(t, err)
		assert.True(t, info.Paused)
		after := paused()
		assert.False(t, embeddedtest.Poll(200*time.Millisecond, 5*time.Millisecond, func() bool { return !paused().Paused }), "an operator's pause was lifted")
		assert.Greater(t, after.PauseRemaining, 50*time.Minute, "an operator's pause was changed")
		_, err = js.ResumeConsumer(ctx, stream, name)
		require.NoError(t, err)
	})
}

// TestResetOfUnreplicatedConsumerDoesNotPause: a consumer without replicas has no raft
// group, so its reset is applied at once: it is not paused (no pause advisory).
func TestResetOfUnreplicatedConsumerDoesNotPause(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	b := embeddedtest.Bus(t, s.ClientURL())
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "reset", Partitions: 1}))
	require.NoError(t, b.SetCursor(ctx, "reset", "g", jetbus.Earliest()))
	nc := embeddedtest.Connect(t, s.ClientURL())
	advisories, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	info, err := jbjs.ResetConsumer(ctx, b, "reset", "g", 0)
	require.NoError(t, err)
	assert.False(t, info.Paused)
	// A pause advisory would have been sent before the reset's answer: flushing this
	// connection after the answer lets any that was sent arrive.
	require.NoError(t, nc.Flush())
	_, err = advisories.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "the consumer was paused")
}
