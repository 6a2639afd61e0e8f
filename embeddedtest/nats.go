package embeddedtest

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// StartServer starts a nats-server with opts and waits until it accepts connections. A port
// it cannot listen on (taken) is an error at once, wrapping ErrPortTaken.
func StartServer(opts *server.Options) (*server.Server, error) {
	return startServer(opts, nil, false)
}

// ErrPortTaken: a server could not listen on a port of its options.
var ErrPortTaken = errors.New("embeddedtest: port taken")

// startServer is StartServer logging to logger (when not nil), with protocol traces if trace.
func startServer(opts *server.Options, logger server.Logger, trace bool) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embeddedtest: new server: %w", err)
	}
	// nats-server logs a port it cannot listen on as fatal and goes on without that listener,
	// never ready: the fatal log line ends the wait.
	fatal := &fatalLog{next: logger}
	s.SetLoggerV2(fatal, false, trace, false)
	go s.Start()
	// Generous: a node of a cluster with JetStream, on a machine loaded by other suites,
	// took more than 10 s once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := s.ReadyForConnections(100 * time.Millisecond)
		if err := fatal.get(); err != nil {
			s.Shutdown()
			return nil, err
		}
		if ready {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("embeddedtest: server not ready within 30s")
		}
	}
}

// fatalLog keeps the first fatal line a server logs, and passes every line on to next (when
// not nil).
type fatalLog struct {
	next server.Logger
	mu   sync.Mutex
	err  error
}

func (l *fatalLog) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.err == nil {
		l.err = fmt.Errorf("embeddedtest: server: "+format, v...)
		if strings.HasPrefix(format, "Error listening on") {
			l.err = fmt.Errorf("%w: %w", ErrPortTaken, l.err)
		}
	}
	l.mu.Unlock()
	if l.next != nil {
		l.next.Fatalf(format, v...)
	}
}

func (l *fatalLog) Noticef(format string, v ...any) {
	if l.next != nil {
		l.next.Noticef(format, v...)
	}
}

func (l *fatalLog) Warnf(format string, v ...any) {
	if l.next != nil {
		l.next.Warnf(format, v...)
	}
}

func (l *fatalLog) Errorf(format string, v ...any) {
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *fatalLog) Debugf(format string, v ...any) {
	if l.next != nil {
		l.next.Debugf(format, v...)
	}
}

func (l *fatalLog) Tracef(format string, v ...any) {
	if l.next != nil {
		l.next.Tracef(format, v...)
	}
}

// NATS starts a single nats-server with JetStream, stored in t.TempDir(), on a random
// loopback port. It is shut down when the test ends. Its warnings and errors go to the
// test's log (shown when the test fails, or with -v): a request the server refuses with a
// bare code (10049 "error creating store for stream") is explained there.
func NATS(t testing.TB) *server.Server {
	t.Helper()
	log := &testServerLog{t: t}
	s, err := startServer(ServerOptions(t.TempDir()), log, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
		log.stop()
	})
	return s
}

// testServerLog passes a server's warnings and errors to its test's log until stop (a
// test's log takes nothing once the test has ended).
type testServerLog struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (l *testServerLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

func (l *testServerLog) logf(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("nats-server %s: %s", level, fmt.Sprintf(format, v...))
	}
}

func (l *testServerLog) Fatalf(format string, v ...any) { l.logf("fatal", format, v...) }
func (l *testServerLog) Errorf(format string, v ...any) { l.logf("error", format, v...) }
func (l *testServerLog) Warnf(format string, v ...any)  { l.logf("warning", format, v...) }
func (l *testServerLog) Noticef(string, ...any)         {}
func (l *testServerLog) Debugf(string, ...any)          {}
func (l *testServerLog) Tracef(string, ...any)          {}

// Connect connects to url (a server's ClientURL, or a cluster's URLs comma-separated) and
// closes the connection when the test ends. The connection retries its reconnects forever, so
// a test that restarts servers keeps it. Its asynchronous errors (a permissions violation, a
// slow consumer) go to the test's log, shown when it fails, unless opts set a handler: nats.go
// would print them on stderr, between the tests' lines.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	var closing atomic.Bool
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if closing.Load() {
				return // the test may be over
			}
			if sub != nil {
				t.Logf("embeddedtest: NATS error on subscription %s: %v", sub.Subject, err)
				return
			}
			t.Logf("embeddedtest: NATS error: %v", err)
		})}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("embeddedtest: connect %s: %v", url, err)
	}
	t.Cleanup(func() {
		closing.Store(true)
		nc.Close()
	})
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
	c := &ClusterT{t: t}
	for _, o := range opts {
		o(&c.cfg)
	}
	base := t.TempDir()
	for try := 1; ; try++ {
		err := c.startNodes(t, n, filepath.Join(base, strconv.Itoa(try)))
		if err == nil {
			break
		}
		// Another process may listen on a port between its choice and the node's start:
		// choose the ports again.
		if !errors.Is(err, ErrPortTaken) || try == 3 {
			t.Fatal(err)
		}
		t.Logf("embeddedtest: cluster start, try %d: %v", try, err)
	}
	t.Cleanup(c.shutdown)
	c.WaitForMetaLeader()
	return c
}

// startNodes starts n nodes stored under base, on ports chosen now: each node's client
// and cluster ports are chosen together, all distinct, so that no node listens on a port
// chosen for another. Nodes keep their ports across restarts. On an error, the nodes
// started are stopped.
func (c *ClusterT) startNodes(t testing.TB, n int, base string) error {
	ports := freePorts(t, 2*n) // client ports, then cluster ports, all distinct
	routes := make([]string, n)
	for i := range n {
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(ports[n+i])
	}
	c.opts, c.servers = nil, make([]*server.Server, n)
	for i := range n {
		o := ServerOptions(filepath.Join(base, fmt.Sprintf("n%d", i)))
		o.ServerName = fmt.Sprintf("n%d", i)
		o.Port = ports[i]
		o.Cluster.Name = "jetbus-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = ports[n+i]
		o.Routes = server.RoutesFromStr(joinExcept(routes, i))
		if c.cfg.users != nil {
			o.Users = (&server.Options{Users: c.cfg.users}).Clone().Users // a copy per node
		}
		c.opts = append(c.opts, o)
	}
	for i, o := range c.opts {
		s, err := c.start(o)
		if err != nil {
			c.shutdown()
			return err
		}
		c.mu.Lock()
		c.servers[i] = s
		c.mu.Unlock()
	}
	return nil
}

// start starts a node with opts, logging to the cluster's logger.
func (c *ClusterT) start(opts *server.Options) (*server.Server, error) {
	if c.cfg.logger != nil {
		opts.NoLog = false
	}
	return startServer(opts, c.cfg.logger, c.cfg.trace)
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

// freePorts chooses n distinct loopback ports nobody listens on now (a variable for a test).
var freePorts = pickPorts

// pickPorts is freePorts.
func pickPorts(t testing.TB, n int) []int {
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
