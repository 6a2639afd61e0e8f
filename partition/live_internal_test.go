package partition

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

// A member's confirm window is its advertised reconnect plus a margin, within bounds; one
// that advertises none gets ConfirmWindow.
func TestConfirmFor(t *testing.T) {
	to := Config{}.Timeouts()
	for _, c := range []struct {
		reconnect, want time.Duration
	}{
		{0, ConfirmWindow}, // advertises none (an older member, a custom delay)
		{350 * time.Millisecond, 600 * time.Millisecond},        // jetbus's processes
		{2100 * time.Millisecond, 2350 * time.Millisecond},      // nats.go's defaults
		{time.Nanosecond, minConfirm},                           // never reconnects
		{time.Hour, to.LeaseTTL},                                // its key expires first anyway
		{100 * time.Millisecond, minConfirm},                    // shorter than the least
		{ConfirmWindow - confirmMargin, ConfirmWindow},          // what the fixed window assumed
		{4*time.Second + 750*time.Millisecond, 5 * time.Second}, // at the TTL
		{4*time.Second + 749*time.Millisecond, 4999 * time.Millisecond},
	} {
		assert.Equal(t, c.want, confirmFor(to, c.reconnect), "reconnect %s", c.reconnect)
	}
}

// reconnectBound reads a connection's own reconnect settings.
func TestReconnectBound(t *testing.T) {
	s := embeddedtest.NATS(t)
	connect := func(opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), opts...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	assert.Equal(t, nats.DefaultReconnectWait+nats.DefaultReconnectJitter, reconnectBound(connect()), "nats.go's defaults")
	assert.Equal(t, 350*time.Millisecond, reconnectBound(connect(nats.ReconnectWait(250*time.Millisecond), nats.ReconnectJitter(100*time.Millisecond, time.Second))))
	assert.Equal(t, time.Nanosecond, reconnectBound(connect(nats.NoReconnect())), "a connection that never comes back")
	assert.Zero(t, reconnectBound(connect(nats.CustomReconnectDelay(func(int) time.Duration { return time.Second }))), "the application's own delay: unknown")
}
