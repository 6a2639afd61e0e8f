package jetstream_test

import (
	"context"
	"encoding/json"
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

// storedAt returns the time the stream stored event seq.
func storedAt(t *testing.T, b *jbjs.Bus, topic string, seq uint64) time.Time {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), jetbus.StreamName(topic))
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	return m.Time
}

func n(t *testing.T, e *jetbus.Event) int {
	t.Helper()
	var v struct{ N int }
	require.NoError(t, json.Unmarshal(e.Payload, &v))
	return v.N
}

func TestKeyedTopicLayout(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "users", Partitions: 4, Keyed: true, KeepPerKey: 1}))
	s, err := b.JetStream().Stream(ctx, "users")
	require.NoError(t, err)
	sc := s.CachedInfo().Config
	assert.Equal(t, []string{"users.p0.>", "users.p1.>", "users.p2.>", "users.p3.>"}, sc.Subjects)
	assert.Equal(t, int64(1), sc.MaxMsgsPerSubject)
	assert.True(t, sc.AllowDirect)
	assert.Equal(t, "true", sc.Metadata[jetbus.MetaKeyed])
	assert.Equal(t, "1", sc.Metadata[jetbus.MetaKeepPerKey])

	ev, err := b.Publish(ctx, "users", map[string]int{"n": 1}, jetbus.WithKey("a.b c"))
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, ev.Seq)
	require.NoError(t, err)
	assert.Equal(t, jetbus.KeyedSubject("users", ev.Partition, "a.b c"), m.Subject)
	assert.Equal(t, fmt.Sprintf("users.p%d.~YS5iIGM", ev.Partition), m.Subject)

	_, err = b.Publish(ctx, "users", map[string]int{"n": 2})
	assert.ErrorIs(t, err, jetbus.ErrInvalidKey, "a keyed topic needs a key")
	assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "users", Partitions: 4}), jbjs.ErrInvalidConfig, "keyed cannot turn plain")
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "plain"}))
	assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "plain", Keyed: true}), jbjs.ErrInvalidConfig, "plain cannot turn keyed")
	assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "x", KeepPerKey: 2}), jbjs.ErrInvalidConfig, "KeepPerKey needs Keyed")
	assert.ErrorIs(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "x", Keyed: true, KeepPerKey: -1}), jbjs.ErrInvalidConfig)

	for _, call := range []func() error{
		func() error { _, err := b.Latest(ctx, "plain", "a"); return err },
		func() error { _, err := b.At(ctx, "plain", "a", time.Now()); return err },
		func() error { _, err := b.Versions(ctx, "plain", "a"); return err },
	} {
		assert.ErrorIs(t, call(), jetbus.ErrNotKeyed)
	}
	many := make([]string, jetbus.MaxLatestKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	_, err = b.Latest(ctx, "users", many...)
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	_, err = b.At(ctx, "users", "bad\nkey", time.Now())
	assert.ErrorIs(t, err, jetbus.ErrInvalidKey)
}

// TestLatestThousandKeys reads the state of 1000 keys in one call after several versions of
// each, and sees compaction keep only KeepPerKey versions.
func TestLatestThousandKeys(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "accounts", Partitions: 8, Keyed: true, KeepPerKey: 2}))
	keys := make([]string, jetbus.MaxLatestKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("acct-%04d", i)
	}
	for v := 1; v <= 3; v++ {
		for _, k := range keys {
			_, err := b.PublishAsync(ctx, "accounts", map[string]int{"n": v}, jetbus.WithKey(k))
			require.NoError(t, err)
		}
	}
	<-b.PublishAsyncComplete()
	assert.Equal(t, uint64(2*len(keys)), streamMsgs(t, b, "accounts"), "two versions kept per key")

	got, err := b.Latest(ctx, "accounts", keys...)
	require.NoError(t, err)
	require.Len(t, got, len(keys), "every key")
	for _, k := range keys {
		assert.Equal(t, 3, n(t, got[k]), k)
		assert.Equal(t, k, got[k].Key)
		assert.Equal(t, jetbus.PartitionOf(k, 8), got[k].Partition)
	}
	some, err := b.Latest(ctx, "accounts", keys[3], "nobody")
	require.NoError(t, err)
	assert.Len(t, some, 1, "nothing for a key without events")
	vs, err := b.Versions(ctx, "accounts", keys[7])
	require.NoError(t, err)
	require.Len(t, vs, 2)
	assert.Equal(t, []int{2, 3}, []int{n(t, vs[0]), n(t, vs[1])})
}

// TestAtBoundaries: At answers by the time the stream stored each event, at exact times.
func TestAtBoundaries(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "prices", Partitions: 2, Keyed: true}))
	var seqs []uint64
	for _, body := range []any{map[string]int{"n": 1}, map[string]int{"n": 2}, nil} { // the last is a tombstone
		ev, err := b.Publish(ctx, "prices", body, jetbus.WithKey("widget"))
		require.NoError(t, err)
		seqs = append(seqs, ev.Seq)
	}
	_, err := b.Publish(ctx, "prices", map[string]int{"n": 9}, jetbus.WithKey("gadget"))
	require.NoError(t, err)
	t1, t2, t3 := storedAt(t, b, "prices", seqs[0]), storedAt(t, b, "prices", seqs[1]), storedAt(t, b, "prices", seqs[2])
	require.True(t, t1.Before(t2) && t2.Before(t3), "distinct store times")

	_, err = b.At(ctx, "prices", "widget", t1.Add(-time.Nanosecond))
	assert.ErrorIs(t, err, jetbus.ErrEventNotFound, "before the first event")
	for _, c := range []struct {
		name string
		at   time.Time
		seq  uint64
	}{
		{"exactly the first", t1, seqs[0]},
		{"between", t1.Add(t2.Sub(t1) / 2), seqs[0]},
		{"exactly the second", t2, seqs[1]},
		{"just before the tombstone", t3.Add(-time.Nanosecond), seqs[1]},
		{"the tombstone", t3, seqs[2]},
		{"long after", t3.Add(time.Hour), seqs[2]},
	} {
		ev, err := b.At(ctx, "prices", "widget", c.at)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.seq, ev.Seq, c.name)
	}
	ev, err := b.At(ctx, "prices", "widget", t3)
	require.NoError(t, err)
	assert.True(t, ev.Tombstone(), "after a tombstone, the tombstone")
	_, err = b.At(ctx, "prices", "nobody", time.Now())
	assert.ErrorIs(t, err, jetbus.ErrEventNotFound)
}

// TestForeignKeyedMessage: a client without jetbus publishes to a key's subject with no
// headers; consumers see the key from the subject's token.
func TestForeignKeyedMessage(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "devices", Partitions: 4, Keyed: true}))
	raw := embeddedtest.Connect(t, s.ClientURL())
	for _, key := range []string{"dev-1", "dev 2"} {
		subject := jetbus.KeyedSubject("devices", jetbus.PartitionOf(key, 4), key)
		resp, err := raw.Request(subject, []byte(`{"on":true}`), 5*time.Second)
		require.NoError(t, err)
		require.Contains(t, string(resp.Data), `"seq"`)
	}
	var mu sync.Mutex
	got := map[string]int{}
	sub, err := b.Subscribe(ctx, "devices", "g", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		got[d.Key] = d.Partition
		mu.Unlock()
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, map[string]int{"dev-1": jetbus.PartitionOf("dev-1", 4), "dev 2": jetbus.PartitionOf("dev 2", 4)}, got)
	latest, err := b.Latest(ctx, "devices", "dev 2")
	require.NoError(t, err)
	assert.Equal(t, "dev 2", latest["dev 2"].Key)
}

// TestColdStartFromKeyedTopic: with KeepPerKey 1, a group starting from the earliest event
// reads one event per key, the latest: the topic is its own snapshot.
func TestColdStartFromKeyedTopic(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "profiles", Partitions: 2, Keyed: true, KeepPerKey: 1}))
	for v := 1; v <= 5; v++ {
		for k := range 10 {
			_, err := b.Publish(ctx, "profiles", map[string]int{"n": v}, jetbus.WithKey(fmt.Sprint("p", k)))
			require.NoError(t, err)
		}
	}
	var mu sync.Mutex
	var seen []*jetbus.Delivery
	sub, err := b.Subscribe(ctx, "profiles", "fresh", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool {
		c, err := b.Cursor(ctx, "profiles", "fresh")
		return err == nil && c.Lag() == 0
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 10, "one event per key")
	for _, d := range seen {
		assert.Equal(t, 5, n(t, d.Event), d.Key)
	}
}

// TestFoldPlainTopic reconstructs a key's state from a plain topic, from the start and from
// a snapshot, up to a time.
func TestFoldPlainTopic(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "ledger", Partitions: 2}))
	var mine []*jetbus.Event
	for i := 1; i <= 20; i++ {
		key := "alice"
		if i%2 == 0 {
			key = fmt.Sprint("other-", i)
		}
		ev, err := b.Publish(ctx, "ledger", map[string]int{"n": i}, jetbus.WithKey(key))
		require.NoError(t, err)
		if key == "alice" {
			mine = append(mine, ev)
		}
	}
	sum := func(opts ...jetbus.FoldOption) (int, int) {
		total, count := 0, 0
		require.NoError(t, b.Fold(ctx, "ledger", "alice", time.Time{}, func(e *jetbus.Event) error {
			assert.Equal(t, "alice", e.Key)
			total += n(t, e)
			count++
			return nil
		}, opts...))
		return total, count
	}
	total, count := sum()
	assert.Equal(t, 10, count)
	assert.Equal(t, 100, total, "1+3+…+19")
	total, count = sum(jetbus.FoldAfter(mine[4].Seq))
	assert.Equal(t, 5, count, "after a snapshot at the fifth event")
	assert.Equal(t, 11+13+15+17+19, total)

	until := storedAt(t, b, "ledger", mine[2].Seq)
	count = 0
	require.NoError(t, b.Fold(ctx, "ledger", "alice", until, func(*jetbus.Event) error { count++; return nil }))
	assert.Equal(t, 3, count, "up to the third event's store time")
	stop := fmt.Errorf("enough")
	assert.ErrorIs(t, b.Fold(ctx, "ledger", "alice", time.Time{}, func(*jetbus.Event) error { return stop }), stop)
}
