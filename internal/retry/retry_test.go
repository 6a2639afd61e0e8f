package retry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// labeled is an error with MongoDB-style error labels, as the driver's CommandError and
// WriteException report them.
type labeled struct{ labels []string }

func (l labeled) Error() string { return fmt.Sprintf("mongo error %v", l.labels) }
func (l labeled) HasErrorLabel(s string) bool {
	for _, x := range l.labels {
		if x == s {
			return true
		}
	}
	return false
}

func apiErr(code int, errCode natsjs.ErrorCode) error {
	return &natsjs.APIError{Code: code, ErrorCode: errCode, Description: "api"}
}

func TestTransient(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"canceled", context.Canceled, false},
		{"canceled wrapped", fmt.Errorf("x: %w", context.Canceled), false},
		// A connection the driver was opening when another operation's failure cleared its
		// pool: the driver cancels the handshake, the caller's context is alive.
		{"MongoDB handshake cancelled by the driver", fmt.Errorf("read the live generation: %w",
			topology.ConnectionError{Wrapped: topology.ConnectionError{ConnectionID: "127.0.0.1:27017[-147]", Wrapped: context.Canceled}}), true},
		{"no MongoDB server selectable", fmt.Errorf("create indexes: %w", topology.ServerSelectionError{Wrapped: errors.New("server selection timeout")}), true},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"jetbus closed", jetbus.ErrClosed, false},
		{"invalid topic", jetbus.ErrInvalidTopic, false},
		{"stream not found", natsjs.ErrStreamNotFound, false},
		{"consumer not found", natsjs.ErrConsumerNotFound, false},
		{"consumer exists", natsjs.ErrConsumerExists, false},
		{"invalid reset", natsjs.ErrConsumerInvalidReset, false},
		{"key exists (CAS)", natsjs.ErrKeyExists, false},
		{"bad request 400", apiErr(400, 10003), false},
		{"jetstream not enabled", natsjs.ErrJetStreamNotEnabled, false},
		{"jetstream not enabled for account", natsjs.ErrJetStreamNotEnabledForAccount, false},
		{"insufficient resources", apiErr(503, 10023), false},
		{"permission", os.ErrPermission, false},

		{"jetbus unavailable", jetbus.ErrUnavailable, true},
		{"jetbus unavailable wrapped", fmt.Errorf("topic x: %w", jetbus.ErrUnavailable), true},
		{"deadline", context.DeadlineExceeded, true},
		{"deadline wrapped", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"nats timeout", nats.ErrTimeout, true},
		{"no responders", nats.ErrNoResponders, true},
		{"disconnected", nats.ErrDisconnected, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true},
		{"leadership change", natsjs.ErrConsumerLeadershipChanged, true},
		{"no heartbeat", natsjs.ErrNoHeartbeat, true},
		{"incomplete results", apiErr(503, 10004), true},
		{"not assigned", apiErr(500, 10007), true},
		{"cluster unavailable", apiErr(503, 10008), true},
		{"no suitable peers (a node restarting)", apiErr(503, 10005), true},
		{"not leader", apiErr(500, 10009), true},
		{"last seq per subject not ready", apiErr(503, 10163), true},
		{"net timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, true},
		{"net refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"mongo retryable write", labeled{[]string{"RetryableWriteError"}}, true},
		{"mongo transient txn", labeled{[]string{"TransientTransactionError"}}, true},
		{"mongo network", labeled{[]string{"NetworkError"}}, true},
		{"mongo resumable change stream", labeled{[]string{"ResumableChangeStreamError"}}, true},
		{"mongo non-resumable", labeled{[]string{"NonResumableChangeStreamError"}}, false},
		{"mongo unknown commit", labeled{[]string{"UnknownTransactionCommitResult"}}, false},
		{"mongo no labels", labeled{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, retry.Transient(c.err))
		})
	}
}

func TestOpaque(t *testing.T) {
	require.NoError(t, retry.Opaque(nil))

	err := retry.Opaque(fmt.Errorf("lookup: %w", nats.ErrTimeout))
	assert.Equal(t, "lookup: nats: timeout", err.Error())
	assert.ErrorIs(t, err, jetbus.ErrUnavailable)
	assert.NotErrorIs(t, err, nats.ErrTimeout, "the dependency's error is not exposed")

	err = retry.Opaque(natsjs.ErrStreamNotFound)
	assert.NotErrorIs(t, err, natsjs.ErrStreamNotFound)
	assert.NotErrorIs(t, err, jetbus.ErrUnavailable)

	err = retry.Opaque(context.Canceled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, jetbus.ErrUnavailable)

	err = retry.Opaque(context.DeadlineExceeded)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, jetbus.ErrUnavailable)
}

func TestBackoff(t *testing.T) {
	b := retry.Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}
	for i, hi := range []time.Duration{10, 20, 40, 40, 40} {
		d := b.Next()
		hi *= time.Millisecond
		assert.True(t, d >= hi/2 && d <= hi, "delay %d = %s, want in [%s, %s]", i, d, hi/2, hi)
	}
	b.Reset()
	assert.LessOrEqual(t, b.Next(), 10*time.Millisecond)

	var zero retry.Backoff
	assert.LessOrEqual(t, zero.Next(), retry.DefaultMin)

	done := make(chan struct{})
	close(done)
	slow := retry.Backoff{Min: time.Hour}
	assert.False(t, slow.Wait(done), "Wait returns at once when done is closed")
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	fast := retry.Policy{Backoff: retry.Backoff{Min: time.Millisecond, Max: time.Millisecond}}

	t.Run("retries transient errors until success", func(t *testing.T) {
		calls := 0
		err := retry.Do(ctx, fast, func(context.Context) error {
			calls++
			if calls < 3 {
				return nats.ErrTimeout
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 3, calls)
	})
	t.Run("stops at a permanent error", func(t *testing.T) {
		calls := 0
		err := retry.Do(ctx, fast, func(context.Context) error { calls++; return natsjs.ErrStreamNotFound })
		assert.ErrorIs(t, err, natsjs.ErrStreamNotFound)
		assert.Equal(t, 1, calls)
	})
	t.Run("bounds attempts", func(t *testing.T) {
		calls := 0
		p := fast
		p.Attempts = 4
		err := retry.Do(ctx, p, func(context.Context) error { calls++; return nats.ErrNoResponders })
		assert.ErrorIs(t, err, nats.ErrNoResponders)
		assert.Equal(t, 4, calls)
	})
	t.Run("bounds each try and retries a timed-out one", func(t *testing.T) {
		calls := 0
		p := fast
		p.Try = 5 * time.Millisecond
		err := retry.Do(ctx, p, func(ctx context.Context) error {
			calls++
			if calls == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 2, calls)
	})
	t.Run("stops when ctx ends", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := retry.Do(cctx, fast, func(context.Context) error {
			calls++
			if calls == 2 {
				cancel()
			}
			return nats.ErrTimeout
		})
		assert.ErrorIs(t, err, nats.ErrTimeout)
		assert.Equal(t, 2, calls)
	})
}
