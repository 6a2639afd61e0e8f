package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// dropped is dlq_dropped_by_limit_total{stream}.
func dropped(t *testing.T, reg *prometheus.Registry, stream string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "dlq_dropped_by_limit_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stream" && l.GetValue() == stream {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return 0
}

// sweep runs the sweeper (and its watch of the limits) until the test ends.
func (e *env) sweep() {
	ctx, cancel := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 20*time.Millisecond) }()
	e.t.Cleanup(func() { cancel(); <-swept })
}

func (e *env) streamState(name string) (msgs, bytes uint64) {
	st, err := e.bus.JetStream().Stream(context.Background(), name)
	require.NoError(e.t, err)
	info, err := st.Info(context.Background())
	require.NoError(e.t, err)
	return info.State.Msgs, info.State.Bytes
}

var pad = []byte(`{"pad":"` + strings.Repeat("x", 2<<10) + `"}`)

// TestDLQBoundedBySize: dead letters of 2 KiB cannot grow the DLQ past MaxBytes; the oldest
// letters go, and the sweeper reports them.
func TestDLQBoundedBySize(t *testing.T) {
	const maxBytes = 64 << 10
	e := newEnv(t, dlq.Config{MaxBytes: maxBytes})
	e.sweep()
	ctx := t.Context()
	i := 0
	require.True(t, embeddedtest.Poll(30*time.Second, time.Millisecond, func() bool {
		for range 20 {
			_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "changefeed.c", By: "changefeed-c", ID: "m-" + strconv.Itoa(i),
				Data: pad, Reason: dlq.ReasonChangefeed, Err: errors.New("schema")})
			require.NoError(t, err)
			i++
		}
		return dropped(t, e.reg, dlq.StreamName) > 0
	}), "the sweeper reports letters dropped at the limit")
	msgs, bytes := e.streamState(dlq.StreamName)
	assert.LessOrEqual(t, bytes, uint64(maxBytes), "the DLQ stays within its bound")
	assert.Less(t, msgs, uint64(i), "the oldest letters went")
}

// TestRefusalsCannotAgeOutDeadLetters: ingress's refusals have a store of their own. A flood of
// them past its bound drops the oldest refusals (reported under their stream) and leaves a
// handler's dead letter in place, though the DLQ's bound is as small.
func TestRefusalsCannotAgeOutDeadLetters(t *testing.T) {
	const maxBytes = 64 << 10
	e := newEnv(t, dlq.Config{MaxBytes: maxBytes, Rejects: dlq.RejectsConfig{MaxBytes: maxBytes}})
	e.topic("orders", 1)
	e.sweep()
	ctx := t.Context()
	sub, err := e.bus.Subscribe(ctx, "orders", "billing", func(context.Context, *jetbus.Delivery) error {
		return jetbus.Permanent(errors.New("no card"))
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	_, err = e.bus.Publish(ctx, "orders", pad, jetbus.WithKey("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{Group: "billing"}) == 1 }, wait, 10*time.Millisecond)

	i := 0
	require.True(t, embeddedtest.Poll(30*time.Second, time.Millisecond, func() bool {
		for range 20 {
			_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", ID: "m-" + strconv.Itoa(i),
				Data: pad, Reason: dlq.ReasonIngress, Err: errors.New("schema")})
			require.NoError(t, err)
			i++
		}
		return dropped(t, e.reg, dlq.RejectsStreamName) > 0
	}), "the sweeper reports refusals dropped at their limit")
	msgs, bytes := e.streamState(dlq.RejectsStreamName)
	assert.LessOrEqual(t, bytes, uint64(maxBytes), "the refusals stay within their bound")
	assert.Less(t, msgs, uint64(i), "the oldest refusals went")
	assert.Equal(t, 1, e.count(dlq.Filter{Group: "billing"}), "the handler's dead letter is still there")
	assert.Zero(t, dropped(t, e.reg, dlq.StreamName), "nothing dropped from the DLQ")
	ls, err := e.q.List(ctx, dlq.Filter{Group: "billing"}, 0)
	require.NoError(t, err)
	assert.Equal(t, dlq.StreamName, ls[0].Stream)
	assert.Equal(t, int(msgs), e.count(dlq.Filter{Group: "ingress"}), "the refusals read with the others")
}
