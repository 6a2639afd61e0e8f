package embeddedtest

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ServerOptions returns the options of a single JetStream server storing under dir, on a
// random loopback port, without logging or signal handling.
func ServerOptions(dir string) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	}
}

// StartServer starts a nats-server with opts and waits until it accepts connections.
func StartServer(opts *server.Options) (*server.Server, error) {
	return startServer(opts, nil)
}

// startServer is StartServer with configure (when not nil) applied before the server starts.
func startServer(opts *server.Options, configure func(*server.Server)) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embeddedtest: new server: %w", err)
	}
	if configure != nil {
		configure(s)
	}
	go s.Start()
	// Generous: a node of a cluster with JetStream, on a machine loaded by other suites,
	// took more than 10 s once.
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embeddedtest: server not ready within 30s")
	}
	return s, nil
}

// NATS starts a single nats-server with JetStream, stored in t.TempDir(), on a random
// loopback port. It is shut down when the test ends.
func NATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := StartServer(ServerOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect connects to url (a server's ClientURL, or a cluster's URLs comma-separated) and
// closes the connection when the test ends. The connection retries its reconnects forever, so
// a test that restarts servers keeps it.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("embeddedtest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ClusterT is a JetStream cluster of servers on loopback.
type ClusterT struct {
	t       testing.TB
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server
	cfg     clusterConfig
}

// ClusterOption configures the servers of Cluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	users  []*server.User
	logger server.Logger
	trace  bool
}

// WithUsers makes every node require a client to log in as one of users, each with its
// permissions (a configuration's authorization block: server.ProcessConfigFile's Users).
// The users are in the global account, where JetStream is; routes between the nodes need no
// login, and the system account stays the server's own.
func WithUsers(users ...*server.User) ClusterOption {
	return func(c *clusterConfig) { c.users = users }
}

// WithLogger sends every node's log (errors, warnings, notices; with trace, every protocol
// message too) to l; permission violations are logged as errors ("Publish Violation - …",
// "Subscription Violation - …"). A restarted node logs there too.
func WithLogger(l server.Logger, trace bool) ClusterOption {
	return func(c *clusterConfig) { c.logger, c.trace = l, trace }
}

// Cluster starts n clustered nats-servers with JetStream on loopback and waits until the
// cluster has a meta leader. They are shut down when the test ends.
func Cluster(t testing.TB, n int, opts ...ClusterOption) *ClusterT {
	t.Helper()
	if n < 1 {
		t.Fatalf("embeddedtest: cluster of %d", n)
	}
	ports := freePorts(t, n)
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(p)
	}
	c := &ClusterT{t: t}
	for _, o := range opts {
		o(&c.cfg)
	}
	base := t.TempDir()
	for i := range n {
		o := ServerOptions(filepath.Join(base, fmt.Sprintf("n%d", i)))
		o.ServerName = fmt.Sprintf("n%d", i)
		o.Cluster.Name = "jetbus-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = ports[i]
		o.Routes = server.RoutesFromStr(joinExcept(routes, i))
		if c.cfg.users != nil {
			o.Users = (&server.Options{Users: c.cfg.users}).Clone().Users // a copy per node
		}
		c.opts = append(c.opts, o)
	}
	c.servers = make([]*server.Server, n)
	for i, o := range c.opts {
		s, err := c.start(o)
		if err != nil {
			c.shutdown()
			t.Fatal(err)
		}
		c.servers[i] = s
		// Keep the client port across restarts.
		o.Port = s.Addr().(*net.TCPAddr).Port
	}
	t.Cleanup(c.shutdown)
	c.WaitForMetaLeader()
	return c
}

// start starts a node with opts, logging to the cluster's logger.
func (c *ClusterT) start(opts *server.Options) (*server.Server, error) {
	if c.cfg.logger == nil {
		return StartServer(opts)
	}
	opts.NoLog = false
	return startServer(opts, func(s *server.Server) { s.SetLoggerV2(c.cfg.logger, false, c.cfg.trace, false) })
}

func joinExcept(routes []string, skip int) string {
	out := ""
	for i, r := range routes {
		if i == skip {
			continue
		}
		if out != "" {
			out += ","
		}
		out += r
	}
	return out
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	ls := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("embeddedtest: free port: %v", err)
		}
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// Servers returns the running servers (nil for a stopped one).
func (c *ClusterT) Servers() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*server.Server(nil), c.servers...)
}

// URLs returns the client URLs of every node, comma-separated, for nats.Connect.
func (c *ClusterT) URLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := ""
	for _, o := range c.opts {
		if out != "" {
			out += ","
		}
		out += fmt.Sprintf("nats://127.0.0.1:%d", o.Port)
	}
	return out
}

// Stop shuts node i down and waits until it is gone.
func (c *ClusterT) Stop(i int) {
	c.t.Helper()
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again with its store, port and routes, and waits for a meta leader.
func (c *ClusterT) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	if c.servers[i] != nil {
		c.mu.Unlock()
		c.t.Fatalf("embeddedtest: node %d is running", i)
	}
	o := c.opts[i].Clone()
	c.mu.Unlock()
	s, err := c.start(o)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	c.WaitForMetaLeader()
}

// MetaLeader returns the index of the node that leads the JetStream meta group, or -1.
func (c *ClusterT) MetaLeader() int {
	for i, s := range c.Servers() {
		if s != nil && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// WaitForMetaLeader waits up to 20s for a meta leader that every running node agrees on and
// that counts every running node as an online peer (else it refuses to place a stream's
// replicas there: "no suitable peers for placement, peer offline").
func (c *ClusterT) WaitForMetaLeader() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.MetaLeader(); l >= 0 && c.allCurrent() && c.allPeersOnline(l) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("embeddedtest: no JetStream meta leader within 20s")
}

func (c *ClusterT) allPeersOnline(leader int) bool {
	running := 0
	servers := c.Servers()
	for _, s := range servers {
		if s != nil {
			running++
		}
	}
	return servers[leader] != nil && len(servers[leader].JetStreamClusterPeers()) >= running
}

func (c *ClusterT) allCurrent() bool {
	for _, s := range c.Servers() {
		if s != nil && !s.JetStreamIsCurrent() {
			return false
		}
	}
	return true
}

// StreamLeader returns the index of the node leading the stream's raft group, or -1.
func (c *ClusterT) StreamLeader(account, stream string) int {
	for i, s := range c.Servers() {
		if s != nil && s.JetStreamIsStreamLeader(account, stream) {
			return i
		}
	}
	return -1
}

func (c *ClusterT) shutdown() {
	for i := range c.Servers() {
		c.Stop(i)
	}
}
