package partition_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
)

func jetStream(t *testing.T, url string) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(embeddedtest.Connect(t, url))
	require.NoError(t, err)
	return js
}

// nextEvent waits up to d for the watcher's next event.
func nextEvent(t *testing.T, w *partition.MemberWatcher, d time.Duration) partition.MemberEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		require.True(t, ok, "watcher closed")
		return ev
	case <-time.After(d):
		t.Fatalf("no member event within %s", d)
	}
	return partition.MemberEvent{}
}

// waitFor waits for an event with op for member id, skipping heartbeats of others.
func waitFor(t *testing.T, w *partition.MemberWatcher, op partition.MemberOp, id string, d time.Duration) partition.MemberEvent {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev := nextEvent(t, w, time.Until(deadline))
		if ev.Op == op && ev.ID == id {
			return ev
		}
	}
}

func TestMembershipJoinLeaveExpire(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	const ttl = time.Second

	openMember := func(id string) (*partition.Group, natsjs.JetStream) {
		js := jetStream(t, s.ClientURL())
		g, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "billing", MemberID: id, TTL: ttl, Version: "v1.2.3"})
		require.NoError(t, err)
		return g, js
	}
	ga, jsa := openMember("a")
	gb, _ := openMember("b")

	// Two independent watchers, on their own connections.
	w1, err := partition.WatchMembers(ctx, jsa, "orders", "billing")
	require.NoError(t, err)
	defer w1.Stop()
	w2, err := partition.WatchMembers(ctx, jetStream(t, s.ClientURL()), "orders", "billing")
	require.NoError(t, err)
	defer w2.Stop()
	<-w1.Ready()

	ma, err := ga.Join(ctx)
	require.NoError(t, err)
	bctx, killB := context.WithCancel(ctx)
	_, err = gb.Join(bctx)
	require.NoError(t, err)

	for _, w := range []*partition.MemberWatcher{w1, w2} {
		ev := waitFor(t, w, partition.MemberUp, "a", 2*time.Second)
		assert.Equal(t, "v1.2.3", ev.Info.Version)
		assert.NotZero(t, ev.Info.PID)
		assert.False(t, ev.Info.LastSeen.IsZero())
		waitFor(t, w, partition.MemberUp, "b", 2*time.Second)
	}

	// Heartbeats keep a alive well past its TTL.
	waitFor(t, w1, partition.MemberUp, "a", 2*time.Second)
	waitFor(t, w1, partition.MemberUp, "a", 2*time.Second)

	// b goes silent: every watcher sees it expire within TTL and a bit.
	killB()
	start := time.Now()
	for _, w := range []*partition.MemberWatcher{w1, w2} {
		waitFor(t, w, partition.MemberExpired, "b", ttl+3*time.Second)
	}
	t.Logf("silent member expired after %s (TTL %s)", time.Since(start), ttl)

	// a leaves gracefully: seen as left.
	require.NoError(t, ma.Leave(ctx))
	for _, w := range []*partition.MemberWatcher{w1, w2} {
		waitFor(t, w, partition.MemberLeft, "a", 2*time.Second)
	}
	require.NoError(t, ma.Leave(ctx), "Leave twice")
}

func TestOpenGroupErrors(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	js := jetStream(t, s.ClientURL())

	_, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "g", TTL: time.Second})
	require.NoError(t, err)
	_, err = partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "g", TTL: 2 * time.Second})
	assert.ErrorIs(t, err, partition.ErrTTLMismatch)
	_, err = partition.OpenGroup(ctx, js, partition.Config{Topic: "orders.p1", Group: "g"})
	assert.ErrorIs(t, err, jetbus.ErrInvalidTopic)

	_, err = partition.WatchMembers(ctx, js, "orders", "nobody")
	assert.ErrorIs(t, err, jetbus.ErrGroupNotFound)
	_, err = partition.WatchMembers(ctx, js, "orders", "bad group")
	assert.ErrorIs(t, err, jetbus.ErrInvalidGroup)
}

func TestConfigValidate(t *testing.T) {
	ok := partition.Config{Topic: "orders", Group: "g"}
	cases := []struct {
		name string
		edit func(*partition.Config)
		want error
	}{
		{"valid", func(*partition.Config) {}, nil},
		{"bad topic", func(c *partition.Config) { c.Topic = "Orders" }, jetbus.ErrInvalidTopic},
		{"reserved topic", func(c *partition.Config) { c.Topic = "dlq.orders" }, jetbus.ErrInvalidTopic},
		{"empty group", func(c *partition.Config) { c.Group = "" }, jetbus.ErrInvalidGroup},
		{"bad group", func(c *partition.Config) { c.Group = "a.b" }, jetbus.ErrInvalidGroup},
		{"negative TTL", func(c *partition.Config) { c.TTL = -time.Second }, partition.ErrInvalidConfig},
		{"too short TTL", func(c *partition.Config) { c.TTL = time.Millisecond }, partition.ErrInvalidConfig},
		{"negative replicas", func(c *partition.Config) { c.Replicas = -1 }, partition.ErrInvalidConfig},
		{"member ID with a dot", func(c *partition.Config) { c.MemberID = "a.b" }, partition.ErrInvalidConfig},
		{"member ID too long", func(c *partition.Config) { c.MemberID = string(make([]byte, 65)) }, partition.ErrInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
			if tc.want == partition.ErrInvalidConfig {
				assert.ErrorIs(t, err, jetbus.ErrInvalidConfig, "the package's sentinel is the root's")
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	to := partition.Config{TTL: 3 * time.Second}.Timeouts()
	assert.Equal(t, partition.Timeouts{
		Heartbeat: 250 * time.Millisecond, LeaseTTL: 3 * time.Second, Renew: time.Second, Guard: 2400 * time.Millisecond,
		Suspect: 312500 * time.Microsecond, Confirm: partition.ConfirmWindow, Probe: 500 * time.Millisecond,
	}, to)
	assert.Equal(t, 600*time.Millisecond/3, partition.Config{TTL: 600 * time.Millisecond}.Timeouts().Heartbeat, "TTL/3 below 750ms")
	def := partition.Config{}.Timeouts()
	assert.Equal(t, partition.DefaultTTL, def.LeaseTTL)
	// A crashed member is suspected, then confirmed gone, well before its lease would expire.
	assert.Less(t, def.Suspect+def.Confirm, def.LeaseTTL/2)
}
