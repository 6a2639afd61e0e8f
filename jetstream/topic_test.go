package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestEnsureTopicUpdatesOnlyChanges: ensuring a topic whose stream already has the
// configuration sends no update (every process start ensures its topics, and an update racing
// another replica's consumer creation is a data race in nats-server 2.15.2); a change of any
// field the topic's configuration sets is sent and applied.
func TestEnsureTopicUpdatesOnlyChanges(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	stream := jetbus.StreamName("orders")

	updated := embeddedtest.StreamUpdates(t, s.ClientURL(), b.Conn())
	seen := 0
	updates := func() int { // so far, of the topic's stream
		t.Helper()
		for _, name := range updated() {
			if name == stream {
				seen++
			}
		}
		return seen
	}

	cfg := jbjs.TopicConfig{Name: "orders", Partitions: 2, MaxAge: time.Hour}
	require.NoError(t, b.EnsureTopic(ctx, cfg))
	for range 3 { // a restart, with the defaults filled in again
		require.NoError(t, b.EnsureTopic(ctx, cfg))
		require.NoError(t, embeddedtest.Bus(t, s.ClientURL()).EnsureTopic(ctx, cfg))
	}
	assert.Zero(t, updates(), "an unchanged topic was updated")

	for i, change := range []func(c *jbjs.TopicConfig){
		func(c *jbjs.TopicConfig) { c.MaxAge = 2 * time.Hour },
		func(c *jbjs.TopicConfig) { c.Partitions = 3 },
		func(c *jbjs.TopicConfig) { c.MaxBytes = 1 << 30 },
		func(c *jbjs.TopicConfig) { c.DuplicateWindow = time.Minute },
		func(c *jbjs.TopicConfig) { c.KeepPerKey = 0 }, // unchanged: no update
	} {
		change(&cfg)
		require.NoError(t, b.EnsureTopic(ctx, cfg))
		assert.Equal(t, min(i+1, 4), updates(), "change %d", i)
	}
	st, err := b.JetStream().Stream(ctx, stream)
	require.NoError(t, err)
	got := st.CachedInfo().Config
	assert.Equal(t, 2*time.Hour, got.MaxAge)
	assert.Len(t, got.Subjects, 3)
	assert.Equal(t, int64(1<<30), got.MaxBytes)
	assert.Equal(t, time.Minute, got.Duplicates)
	assert.Equal(t, "3", got.Metadata[jetbus.MetaPartitions])
	n, err := b.Partitions(ctx, "orders")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
}
