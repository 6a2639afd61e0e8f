package dlq_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// dropped is dlq_dropped_by_limit_total{stream} (summed over limit, or of the limits given).
func dropped(t *testing.T, reg *prometheus.Registry, stream string, limits ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "dlq_dropped_by_limit_total" {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["stream"] == stream && (len(limits) == 0 || slices.Contains(limits, labels["limit"])) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// recordLogs returns a logger at debug level and what it wrote.
func recordLogs() (*slog.Logger, *embeddedtest.SyncBuffer) {
	var buf embeddedtest.SyncBuffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

// logged counts the lines of logs at level whose message starts with msg and that name stream.
func logged(logs *embeddedtest.SyncBuffer, level, msg, stream string) int {
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, `msg="`+msg) && strings.Contains(line, "stream="+stream+" ") {
			n++
		}
	}
	return n
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
// them past its bound drops the oldest refusals (reported under their stream, with a warning)
// and leaves a handler's dead letter in place, though the DLQ's bound is as small.
func TestRefusalsCannotAgeOutDeadLetters(t *testing.T) {
	const maxBytes = 64 << 10
	log, logs := recordLogs()
	e := newEnv(t, dlq.Config{MaxBytes: maxBytes, Rejects: dlq.RejectsConfig{MaxBytes: maxBytes}}, dlq.WithLogger(log))
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
	assert.Positive(t, dropped(t, e.reg, dlq.RejectsStreamName, "max_bytes"))
	assert.Positive(t, logged(logs, "WARN", "dlq: letters dropped", dlq.RejectsStreamName), "a flood is warned about")
}

// TestRefusalsAgingOutAreNoAlarm: refusals reaching dlq.rejects.max_age is how their stream
// works: counted (limit max_age), logged at debug, never warned about, whereas dead letters
// reaching dlq.max_age are warned about.
func TestRefusalsAgingOutAreNoAlarm(t *testing.T) {
	log, logs := recordLogs()
	e := newEnv(t, dlq.Config{MaxAge: time.Second, Rejects: dlq.RejectsConfig{MaxAge: time.Second}}, dlq.WithLogger(log))
	e.sweep()
	ctx := t.Context()
	for i := range 5 {
		_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", ID: "r-" + strconv.Itoa(i),
			Data: []byte(`{}`), Reason: dlq.ReasonIngress, Err: errors.New("schema")})
		require.NoError(t, err)
	}
	_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "changefeed.c", By: "changefeed-c", ID: "c-1",
		Data: []byte(`{}`), Reason: dlq.ReasonChangefeed, Err: errors.New("schema")})
	require.NoError(t, err)
	require.True(t, embeddedtest.Poll(30*time.Second, 10*time.Millisecond, func() bool {
		return dropped(t, e.reg, dlq.RejectsStreamName) == 5 && dropped(t, e.reg, dlq.StreamName) == 1
	}), "the sweeper counts what aged out of both streams")
	assert.Equal(t, 5.0, dropped(t, e.reg, dlq.RejectsStreamName, "max_age"))
	require.True(t, embeddedtest.Poll(wait, 10*time.Millisecond, func() bool {
		return logged(logs, "DEBUG", "dlq: refusals aged out", dlq.RejectsStreamName) > 0 &&
			logged(logs, "WARN", "dlq: letters dropped", dlq.StreamName) > 0
	}), "logged: %s", logs.String())
	assert.Zero(t, logged(logs, "WARN", "dlq: letters dropped", dlq.RejectsStreamName), "no warning for refusals aging out")
}
