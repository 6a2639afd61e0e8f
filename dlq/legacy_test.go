package dlq_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
)

// TestLegacyReplayRecordPassesItsGroup: a replay recorded by a jetbus before fingerprints
// (the record holds the group's name alone) is handled by the group it was meant for — not
// dead-lettered again as parked behind its own letter while the processes are upgraded —
// and skipped by no other group.
func TestLegacyReplayRecordPassesItsGroup(t *testing.T) {
	e := newEnv(t, dlq.Config{Parking: true})
	e.topic("acct", 1)
	ctx := t.Context()
	var mu sync.Mutex
	broken := true
	handled := map[string][]string{} // group -> IDs of the replayed events it handled
	for _, g := range []string{"ledger", "audit"} {
		sub, err := e.bus.Subscribe(ctx, "acct", g, func(_ context.Context, d *jetbus.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if g == "ledger" && broken {
				return jetbus.Permanent(errors.New("ledger down"))
			}
			if strings.HasPrefix(d.ID, "replay:") {
				handled[g] = append(handled[g], d.ID)
			}
			return nil
		}, jetbus.FromEarliest(), fast)
		require.NoError(t, err)
		defer sub.Stop()
	}
	_, err := e.bus.Publish(ctx, "acct", body{Key: "a", N: 1}, jetbus.WithKey("a"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 1 && e.lag("acct", "ledger") == 0 }, wait, 10*time.Millisecond)
	parked, err := e.q.ParkedKeys(ctx, "ledger", "acct")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, parked)
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	id := dlq.ReplayID(ls[0])

	// What an older jetbus's replay left: the record holds the group alone, then the event.
	kv, err := e.bus.JetStream().KeyValue(ctx, dlq.ReplayBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, base64.RawURLEncoding.EncodeToString([]byte(id)), []byte("ledger"))
	require.NoError(t, err)
	mu.Lock()
	broken = false
	mu.Unlock()
	_, err = e.bus.Publish(ctx, "acct", ls[0].Body, jetbus.WithDerivedID(id), jetbus.WithKey("a"))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled["ledger"]) == 1 && len(handled["audit"]) == 1
	}, wait, 10*time.Millisecond, "the replaying group handles it; the other group skips nothing")
	require.Eventually(t, func() bool { return e.lag("acct", "ledger") == 0 }, wait, 10*time.Millisecond)
	assert.Zero(t, e.count(dlq.Filter{Reason: dlq.ReasonParked}), "not dead-lettered again as parked")
}
