package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

func bridge(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDLQCommands(t *testing.T) {
	s := embeddedtest.NATS(t)
	url := s.ClientURL()
	ctx := context.Background()
	nc := embeddedtest.Connect(t, url)
	bare, err := jetstream.Open(ctx, nc)
	require.NoError(t, err)
	q, err := dlq.Open(ctx, bare.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	bus, err := jetstream.Open(ctx, nc, jetstream.WithHandlerMiddleware(q.Middleware()))
	require.NoError(t, err)
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders"}))
	var mu sync.Mutex
	fixed := false
	handled := 0
	sub, err := bus.Subscribe(ctx, "orders", "billing", func(context.Context, *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return jetbus.Permanent(errors.New("no card"))
		}
		handled++
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	for _, k := range []string{"a", "b"} {
		_, err := bus.Publish(ctx, "orders", map[string]string{"k": k}, jetbus.WithKey(k))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { n, _ := q.Count(ctx, dlq.Filter{}); return n == 2 }, 10*time.Second, 10*time.Millisecond)

	code, out, _ := bridge(t, "dlq", "count", "--nats-url", url)
	assert.Equal(t, 0, code)
	assert.Equal(t, "2\n", out)
	code, out, _ = bridge(t, "dlq", "list", "--nats-url", url, "--key", "a")
	assert.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, "\n"), "a header and one letter: %s", out)
	assert.Regexp(t, `(?m)^SEQ +DEAD-LETTERED +TOPIC +GROUP +REASON`, out)
	assert.Regexp(t, `(?m)^\d+ +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +orders +billing +permanent +"a" +1 `, out, "RFC 3339 times")
	code, out, _ = bridge(t, "dlq", "list", "--nats-url", url, "--json", "--since", "1h")
	assert.Equal(t, 0, code)
	assert.Equal(t, 2, strings.Count(out, `"Reason":"permanent"`))
	code, out, _ = bridge(t, "dlq", "show", "1", "--nats-url", url)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, `"Group": "billing"`)
	code, _, _ = bridge(t, "dlq", "show", "x", "--nats-url", url)
	assert.Equal(t, 2, code)
	code, _, errOut := bridge(t, "dlq", "show", "99", "--nats-url", url)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not found")
	code, _, _ = bridge(t, "dlq", "list", "--nats-url", url, "--since", "yesterday")
	assert.Equal(t, 2, code, "bad time")
	code, _, errOut = bridge(t, "dlq", "list", "--nats-url", url, "--topic", "Bad Topic")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "invalid filter")
	code, _, _ = bridge(t, "dlq", "frobnicate")
	assert.Equal(t, 2, code)

	code, out, _ = bridge(t, "dlq", "replay", "--nats-url", url, "--dry-run")
	assert.Equal(t, 0, code)
	assert.Equal(t, 2, strings.Count(out, "would replay"))
	mu.Lock()
	fixed = true
	mu.Unlock()
	code, out, _ = bridge(t, "dlq", "replay", "--nats-url", url, "--key", "a")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "replayed 1 of 1")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return handled == 1 }, 10*time.Second, 10*time.Millisecond)

	code, _, errOut = bridge(t, "dlq", "discard", "--nats-url", url)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "would remove 1")
	code, out, _ = bridge(t, "dlq", "discard", "--nats-url", url, "--yes")
	assert.Equal(t, 0, code)
	assert.Equal(t, "discarded 1\n", out)
	n, err := q.Count(ctx, dlq.Filter{})
	require.NoError(t, err)
	assert.Equal(t, 0, n)
}

// TestReasonFlagTakesEveryReason: --reason accepts the reasons every part of jetbus writes,
// so each kind of dead letter can be listed, replayed and discarded on its own.
func TestReasonFlagTakesEveryReason(t *testing.T) {
	for _, r := range []string{dlq.ReasonMaxAttempts, dlq.ReasonPermanent, dlq.ReasonDecode, dlq.ReasonMaxDeliveries,
		dlq.ReasonParked, dlq.ReasonProjection, dlq.ReasonIngress, dlq.ReasonChangefeed} {
		assert.Contains(t, reasons, r)
	}
}

// TestDLQCommandsReadRefusals: ingress's refusals, kept in their own stream, are listed,
// counted, shown and discarded with the handlers' dead letters, by position rejects:<seq>.
func TestDLQCommandsReadRefusals(t *testing.T) {
	s := embeddedtest.NATS(t)
	url := s.ClientURL()
	ctx := context.Background()
	bare, err := jetstream.Open(ctx, embeddedtest.Connect(t, url))
	require.NoError(t, err)
	q, err := dlq.Open(ctx, bare.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	_, err = q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.changefeed", By: "changefeed-c", ID: "c-1", Data: []byte(`{}`),
		Reason: dlq.ReasonChangefeed, Err: errors.New("schema")})
	require.NoError(t, err)
	_, err = q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", ID: "i-1", Data: []byte(`{"n":`),
		Reason: dlq.ReasonIngress, Err: errors.New("not_json")})
	require.NoError(t, err)

	code, out, _ := bridge(t, "dlq", "count", "--nats-url", url)
	assert.Equal(t, 0, code)
	assert.Equal(t, "2\n", out)
	code, out, _ = bridge(t, "dlq", "list", "--nats-url", url)
	assert.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^1 +\S+ +orders +changefeed-c +changefeed `, out, "the DLQ's first")
	assert.Regexp(t, `(?m)^rejects:1 +\S+ +orders +ingress +ingress `, out, "then the refusals")
	code, out, _ = bridge(t, "dlq", "show", "rejects:1", "--nats-url", url)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, `"Stream": "DLQ_REJECTS"`)
	assert.Contains(t, out, `"BodyText": "{\"n\":"`, "a body that is not JSON, as a string")
	code, out, _ = bridge(t, "dlq", "list", "--nats-url", url, "--from-seq", "rejects:1")
	assert.Equal(t, 0, code)
	assert.Equal(t, 2, strings.Count(out, "\n"), "a header and the refusal: %s", out)
	code, _, _ = bridge(t, "dlq", "list", "--nats-url", url, "--from-seq", "nope:1")
	assert.Equal(t, 2, code)
	code, out, _ = bridge(t, "dlq", "discard", "--nats-url", url, "--group", "ingress", "--yes")
	assert.Equal(t, 0, code)
	assert.Equal(t, "discarded 1\n", out)
	n, err := q.Count(ctx, dlq.Filter{})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}
