package jetstream_test

import (
	"context"
	"fmt"
	"sync"
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

// TestEnsureTopicConcurrentCreates: processes that create one topic at once, each with another
// partition count, all end with an answer: the winner's create, the others' look again (their
// create met "already in use") and an update, or the refusal to shrink. None sees the create's
// conflict, and the topic ends as one of them asked.
func TestEnsureTopicConcurrentCreates(t *testing.T) {
	s := embeddedtest.NATS(t)
	const processes = 5
	buses := make([]*jbjs.Bus, processes)
	for i := range buses {
		buses[i] = embeddedtest.Bus(t, s.ClientURL())
	}
	for round := range 4 {
		topic := fmt.Sprintf("race%d", round)
		start := make(chan struct{})
		errs := make([]error, processes)
		var wg sync.WaitGroup
		for i, b := range buses {
			wg.Go(func() {
				<-start
				errs[i] = b.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: topic, Partitions: i + 1})
			})
		}
		close(start)
		wg.Wait()
		ok := map[int]bool{}
		for i, err := range errs {
			if err == nil {
				ok[i+1] = true
			} else {
				require.ErrorIs(t, err, jbjs.ErrInvalidConfig, "process %d", i)
			}
		}
		require.True(t, ok[processes], "the largest partition count is never refused")
		n, err := embeddedtest.Bus(t, s.ClientURL()).Partitions(t.Context(), topic)
		require.NoError(t, err)
		assert.True(t, ok[n], "the topic has %d partitions, which no successful process asked for", n)
	}
}
