package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
)

// TestCancelledReplayReleasesWhatItReplayed: a replay whose context ends while replayed keys
// are being released (the release every releaseBatch keys, mid-run) still releases them: no
// key stays parked without a letter.
func TestCancelledReplayReleasesWhatItReplayed(t *testing.T) {
	defer dlq.SetReleaseBatch(2)()
	e := newEnv(t, dlq.Config{Parking: true})
	e.topic("acct", 1)
	ctx := t.Context()
	var mu sync.Mutex
	broken := true
	sub, err := e.bus.Subscribe(ctx, "acct", "ledger", func(context.Context, *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return jetbus.Permanent(errors.New("ledger down"))
		}
		return nil
	}, jetbus.FromEarliest(), fast)
	require.NoError(t, err)
	defer sub.Stop()
	const keys = 6
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		_, err := e.bus.Publish(ctx, "acct", body{Key: k, N: i}, jetbus.WithKey(k))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == keys && e.lag("acct", "ledger") == 0 }, wait, 10*time.Millisecond)
	parked, err := e.q.ParkedKeys(ctx, "ledger", "acct")
	require.NoError(t, err)
	require.Len(t, parked, keys)
	mu.Lock()
	broken = false
	mu.Unlock()

	// The context ends once the chunk's letters are replayed, before their keys are released.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := 0
	rep, err := e.q.Replay(rctx, e.bus, dlq.ReplayOptions{OnLetter: func(*dlq.Letter, *jetbus.Event, error) {
		if seen++; seen == keys/2 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, keys, rep.Replayed)
	assert.Zero(t, e.count(dlq.Filter{}), "every letter replayed and removed")
	parked, err = e.q.ParkedKeys(ctx, "ledger", "acct")
	require.NoError(t, err)
	assert.Empty(t, parked, "no key stays parked without a letter")
}
