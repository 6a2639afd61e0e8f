package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
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

// With KeyConcurrency, other keys go on while one key's event is stuck or retrying, and the
// stuck key keeps its order across the retry.
func TestKeyConcurrencyKeepsPerKeyOrderAcrossRetries(t *testing.T) {
	s := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, s.ClientURL())
	ctx := context.Background()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "kc"})) // one partition
	type ev struct {
		Key string
		N   int
	}
	// Keys a and b land on different workers of 4 (checked below through the log of handling).
	var mu sync.Mutex
	var log []string
	bDone := make(chan struct{})
	bCount := 0
	sub, err := b.Subscribe(ctx, "kc", "g", func(_ context.Context, d *jetbus.Delivery) error {
		var e ev
		require.NoError(t, json.Unmarshal(d.Payload, &e))
		if e.Key == "a" && e.N == 0 && d.Attempt == 1 {
			// Blocks until every b event is handled: only possible if b runs meanwhile.
			select {
			case <-bDone:
			case <-time.After(10 * time.Second):
				return jetbus.Permanent(errors.New("b never ran while a was busy"))
			}
			mu.Lock()
			log = append(log, "a0 failed")
			mu.Unlock()
			return errors.New("transient")
		}
		mu.Lock()
		defer mu.Unlock()
		log = append(log, fmt.Sprintf("%s%d@%d", e.Key, e.N, d.Attempt))
		if e.Key == "b" {
			bCount++
			if bCount == 3 {
				close(bDone)
			}
		}
		return nil
	}, jetbus.FromEarliest(), jetbus.KeyConcurrency(4),
		jetbus.Backoff(jetbus.ExponentialBackoff(20*time.Millisecond, 20*time.Millisecond)))
	require.NoError(t, err)
	defer sub.Stop()
	for i := range 3 {
		for _, k := range []string{"a", "b"} {
			_, err := b.Publish(ctx, "kc", ev{Key: k, N: i}, jetbus.WithKey(k))
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(log) == 7 }, 15*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	var a []string
	for _, l := range log {
		if l[0] == 'a' {
			a = append(a, l)
		}
	}
	assert.Equal(t, []string{"a0 failed", "a0@2", "a1@1", "a2@1"}, a, "key a in order, retried in place")
	assert.Equal(t, "b0@1", log[0], "b went on while a was busy: %v", log)
}

func TestKeyConcurrencyOptions(t *testing.T) {
	_, err := jetbus.ApplySubscribeOptions(jetbus.KeyConcurrency(-1))
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	_, err = jetbus.ApplySubscribeOptions(jetbus.KeyConcurrency(4), jetbus.ManualAck())
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	// Unordered retries through the server: nothing is retried in place.
	_, err = jetbus.ApplySubscribeOptions(jetbus.KeyConcurrency(4), jetbus.ManualAck(), jetbus.Unordered())
	assert.NoError(t, err)
}
