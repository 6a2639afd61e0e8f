package embeddedtest

import (
	"net"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestStartServerPortTaken: a server whose client or cluster port another process listens on
// is an error wrapping ErrPortTaken at once, not a wait for a server never ready.
func TestStartServerPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	taken := l.Addr().(*net.TCPAddr).Port

	o := ServerOptions(t.TempDir())
	o.Port = taken
	_, err = StartServer(o)
	require.ErrorIs(t, err, ErrPortTaken)
	require.ErrorContains(t, err, "Error listening on port")

	o = ServerOptions(t.TempDir())
	o.JetStream = false // a JetStream cluster wants routes
	o.ServerName, o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "n0", "jetbus-test", "127.0.0.1", taken
	_, err = StartServer(o)
	require.ErrorIs(t, err, ErrPortTaken)
	require.ErrorContains(t, err, "Error listening on router port")
}

// TestClusterChoosesPortsAgain: when a port chosen for a node is taken before the node
// listens on it (another process's), Cluster chooses the ports again and starts.
func TestClusterChoosesPortsAgain(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	t.Cleanup(func() { freePorts = pickPorts })
	freePorts = func(t testing.TB, n int) []int {
		calls++
		ports := pickPorts(t, n)
		if calls == 1 {
			ports[n-1] = taken // the last node's cluster port
		}
		return ports
	}
	c := Cluster(t, 3)
	require.Equal(t, 2, calls)
	for i, s := range c.Servers() {
		require.NotEqual(t, taken, s.ClusterAddr().Port, "node %d", i)
	}
	js, err := jetstream.New(Connect(t, c.URLs()))
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Replicas: 3})
	require.NoError(t, err, "the three nodes form a cluster")
}
