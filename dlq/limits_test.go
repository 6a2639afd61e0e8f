package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// TestDLQBoundedBySize: a flood of refused 2 KiB messages cannot grow the DLQ past MaxBytes;
// the oldest letters go, and the sweeper reports them.
func TestDLQBoundedBySize(t *testing.T) {
	const maxBytes = 64 << 10
	e := newEnv(t, dlq.Config{MaxBytes: maxBytes})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 20*time.Millisecond) }()
	defer func() { cancel(); <-swept }()
	body := []byte(`{"pad":"` + strings.Repeat("x", 2<<10) + `"}`)
	dropped := func() float64 {
		mfs, err := e.reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "dlq_dropped_by_limit_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	i := 0
	require.True(t, embeddedtest.Poll(30*time.Second, time.Millisecond, func() bool {
		for range 20 {
			_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", ID: "m-" + strconv.Itoa(i),
				Data: body, Reason: dlq.ReasonIngress, Err: errors.New("schema")})
			require.NoError(t, err)
			i++
		}
		return dropped() > 0
	}), "the sweeper reports letters dropped at the limit")
	st, err := e.bus.JetStream().Stream(ctx, dlq.StreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, info.State.Bytes, uint64(maxBytes), "the DLQ stays within its bound")
	assert.Less(t, info.State.Msgs, uint64(i), "the oldest letters went")
}
