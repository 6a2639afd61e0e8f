package schema_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

// TestRegistryWatchSurvivesServerRestart restarts the server under a long-lived Registry: its
// watch's consumer is lost, and the resync check must bring the view up to date within the
// documented bound (about two DefaultResyncIntervals once the connection is back).
func TestRegistryWatchSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := embeddedtest.StartServer(embeddedtest.ServerOptions(dir))
	require.NoError(t, err)
	port := s.Addr().(*net.TCPAddr).Port
	ctx := ctxT(t)

	long := openRegistry(t, embeddedtest.Connect(t, s.ClientURL()))
	_, err = long.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)

	s.Shutdown()
	s.WaitForShutdown()
	opts := embeddedtest.ServerOptions(dir)
	opts.Port = port
	s2, err := embeddedtest.StartServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })

	other := openRegistry(t, embeddedtest.Connect(t, s2.ClientURL()))
	start := time.Now()
	_, err = other.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := long.Latest(ctx, "orders.created")
		return err == nil && v.Version == 2
	}, 5*time.Second, 20*time.Millisecond, "the long-lived registry catches up within about two resync intervals")
	t.Logf("seen after %s", time.Since(start))
}
