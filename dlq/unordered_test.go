package dlq_test

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
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// An unordered group (jetbus.Unordered) dead-letters as an ordered one does, with two members
// sharing its partition: a poison event after MaxAttempts, a Permanent error at once, an
// undecodable body without a handler, and a hung handler's event through the sweeper.
func TestUnorderedGroupDeadLetters(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("bulk", 1)
	ctx, cancel := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-swept }()

	var mu sync.Mutex
	calls := map[int][]int{} // body N → attempts seen
	release := make(chan struct{})
	handler := func(_ context.Context, d *jetbus.Delivery) error {
		var b body
		require.NoError(t, json.Unmarshal(d.Payload, &b))
		mu.Lock()
		calls[b.N] = append(calls[b.N], d.Attempt)
		mu.Unlock()
		switch b.N {
		case 1:
			return fmt.Errorf("boom %d", d.Attempt)
		case 2:
			return jetbus.Permanent(errors.New("invalid"))
		case 3:
			<-release // hangs: the server redelivers after the ack timeout, then gives up
		}
		return nil
	}
	// A second member on a Bus of its own, with the same middleware.
	other, err := jbjs.Open(ctx, embeddedtest.Connect(t, e.srv.ClientURL()), jbjs.WithHandlerMiddleware(e.q.Middleware()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	opts := []jetbus.SubscribeOption{jetbus.Unordered(), jetbus.FromEarliest(), jetbus.MaxAttempts(3), fast, jetbus.AckTimeout(200 * time.Millisecond)}
	for _, b := range []*jbjs.Bus{e.bus, other} {
		sub, err := b.Subscribe(ctx, "bulk", "g", handler, opts...)
		require.NoError(t, err)
		defer sub.Stop()
	}
	defer close(release) // before the Stops: a hung handler holds its subscription
	for _, n := range []int{1, 2, 4} {
		_, err := e.bus.Publish(ctx, "bulk", body{N: n})
		require.NoError(t, err)
	}
	require.NoError(t, e.bus.Conn().Publish("bulk.p0", []byte("{not json")))
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 3 }, wait, 10*time.Millisecond)
	// Published alone: the events a member fetched behind a hung handler would wait there too,
	// and be given up on as well.
	_, err = e.bus.Publish(ctx, "bulk", body{N: 3})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 4 }, wait, 10*time.Millisecond)
	for reason, attempts := range map[string]int{dlq.ReasonMaxAttempts: 3, dlq.ReasonPermanent: 1, dlq.ReasonDecode: 1, dlq.ReasonMaxDeliveries: 3} {
		ls, err := e.q.List(ctx, dlq.Filter{Reason: reason}, 0)
		require.NoError(t, err)
		require.Len(t, ls, 1, reason)
		assert.Equal(t, "g", ls[0].Group, reason)
		assert.Equal(t, attempts, ls[0].Attempts, reason)
	}
	require.Eventually(t, func() bool { return e.lag("bulk", "g") == 0 }, wait, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 2, 3}, calls[1], "retried until MaxAttempts")
	assert.Equal(t, []int{1}, calls[2], "a permanent failure is not retried")
	assert.Len(t, calls[4], 1, "the good event handled once")
}
