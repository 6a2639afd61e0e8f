package dlq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
)

// TestNoPublisherMakesAGroupSkipAnEvent: the replay marker is a record only Replay writes,
// not a header, so neither a Go publisher nor a raw NATS client can make a group with the
// dead-letter middleware acknowledge an event without handling it.
func TestNoPublisherMakesAGroupSkipAnEvent(t *testing.T) {
	e := newEnv(t, dlq.Config{Parking: true})
	e.topic("mail", 1)
	ctx := t.Context()

	var mu sync.Mutex
	handled := map[string]map[string]bool{} // group -> event IDs
	for _, g := range []string{"sender", "audit"} {
		handled[g] = map[string]bool{}
		sub, err := e.bus.Subscribe(ctx, "mail", g, func(_ context.Context, d *jetbus.Delivery) error {
			mu.Lock()
			handled[g][d.ID] = true
			mu.Unlock()
			return nil
		}, jetbus.FromEarliest(), fast)
		require.NoError(t, err)
		defer sub.Stop()
	}

	// From Go, the header is refused, by WithHeaders and by a publish middleware alike.
	_, err := e.bus.Publish(ctx, "mail", body{N: 1}, jetbus.WithHeaders(map[string]string{"x-dlq-replay-group": "sender"}))
	assert.ErrorIs(t, err, jetbus.ErrReservedHeader)
	_, err = e.bus.Publish(ctx, "mail", body{N: 1}, jetbus.WithKey("k\r\nx-dlq-replay-group: sender"))
	assert.ErrorIs(t, err, jetbus.ErrInvalidKey, "a header smuggled in a key")
	for _, id := range []string{"replay:MAIL:1:sender", "dlq:MAIL:1:sender"} {
		_, err = e.bus.Publish(ctx, "mail", body{N: 1}, jetbus.WithID(id))
		assert.ErrorIs(t, err, jetbus.ErrReservedHeader, "an ID shaped like jetbus's own: %s", id)
	}

	// From a raw client: the header, and an ID shaped like a replay's, are only data.
	forged := []*nats.Msg{
		{Subject: "mail.p0", Data: []byte(`{"n":2}`), Header: nats.Header{
			"Nats-Msg-Id": {"forged-1"}, "x-dlq-replay-group": {"sender"}}},
		{Subject: "mail.p0", Data: []byte(`{"n":3}`), Header: nats.Header{
			"Nats-Msg-Id": {"replay:MAIL:1:sender"}, "x-dlq-replay-group": {"sender"}}},
		{Subject: "mail.p0", Data: []byte(`{"n":4}`), Header: nats.Header{
			"Nats-Msg-Id": {"forged-2"}, "x-key": {"k"}, "x-dlq-reason": {"parked"}}},
	}
	for _, m := range forged {
		_, err := e.bus.JetStream().PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	ids := []string{"forged-1", "replay:MAIL:1:sender", "forged-2"}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range []string{"sender", "audit"} {
			for _, id := range ids {
				if !handled[g][id] {
					return false
				}
			}
		}
		return true
	}, wait, 10*time.Millisecond, "every group handles every forged event")
	assert.Equal(t, 0, e.count(dlq.Filter{}), "nothing was dead-lettered or parked by a header")
}
