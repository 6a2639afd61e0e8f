package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// build holds the binaries built once per test binary.
var build struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// binaries builds bridge, projector (production builds) and examples/counter (a transactional
// projection as a program of its own) once and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "jetbus-e2e-bin-")
		if build.err != nil {
			return
		}
		build.out, build.err = exec.Command("go", "build", "-o", build.dir+string(filepath.Separator),
			"../cmd/bridge", "../cmd/projector", "../examples/counter").CombinedOutput()
	})
	require.NoError(t, build.err, "go build: %s", build.out)
	return build.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// stack is the whole deployment of one test: three NATS nodes, the MongoDB test backend, the
// configuration, and the bridge and projector processes.
type stack struct {
	t    *testing.T
	bin  string
	nats *embeddedtest.ClusterT
	// The users the processes and clients log in as (deploy/nats/auth.conf), and what the
	// servers refused them.
	passwords  map[string]string
	violations violations
	mongoMu    sync.Mutex
	mongo      *minimongo.Server
	mongoOp    minimongo.Options // to restart it on the same port with the same data
	db         string
	config     string
	dir        string
	mu         sync.Mutex
	procs      []*proc
	counter    map[string]int
	// env is more environment for the bridge and projector processes (tracing).
	env []string
}

// newStack starts NATS and MongoDB and writes the configuration; the processes are started by
// the scenario (startProc).
func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, bin: binaries(t), dir: t.TempDir(), db: "e2e", counter: map[string]int{}}
	s.natsCluster()
	s.mongoOp = minimongo.Options{Addr: "127.0.0.1:0", Dir: filepath.Join(s.dir, "mongo")}
	m, err := minimongo.Start(s.mongoOp)
	require.NoError(t, err)
	s.mongo, s.mongoOp.Addr = m, m.Addr()
	t.Cleanup(func() {
		s.mongoMu.Lock()
		defer s.mongoMu.Unlock()
		if s.mongo != nil {
			_ = s.mongo.Close()
		}
	})
	s.config = filepath.Join(s.dir, "jetbus.yaml")
	require.NoError(t, os.WriteFile(s.config, []byte(s.yaml()), 0o644))
	return s
}

// mongoURI is where the processes and the checker reach MongoDB; it stays the same across a
// restart of the backend.
func (s *stack) mongoURI() string {
	return fmt.Sprintf("mongodb://%s/?replicaSet=rs0&directConnection=true", s.mongoOp.Addr)
}

// stopMongo stops the backend cleanly (it writes its data to its directory).
func (s *stack) stopMongo() {
	s.t.Helper()
	s.mongoMu.Lock()
	defer s.mongoMu.Unlock()
	require.NoError(s.t, s.mongo.Close())
	s.mongo = nil
}

// startMongo starts the backend again on the same port with the same data.
func (s *stack) startMongo() {
	s.t.Helper()
	s.mongoMu.Lock()
	defer s.mongoMu.Unlock()
	m, err := minimongo.Start(s.mongoOp)
	require.NoError(s.t, err)
	s.mongo = m
}

func (s *stack) yaml() string {
	urls := strings.Split(s.nats.URLs(), ",")
	return fmt.Sprintf(`nats:
  urls: [%s]
mongo:
  uri: %s
  database: %s
http:
  addr: 127.0.0.1:0
  api_addr: 127.0.0.1:0
log:
  level: info
shutdown:
  timeout: 20s
topics:
  - name: orders
    partitions: 4
    replicas: 3
  - name: customers
    partitions: 2
    replicas: 3
dlq:
  replicas: 3
  sweep_interval: 1s
ingress:
  allow: [orders]
changefeeds:
  - name: customers-cdc
    collection: customers
    topic: customers
    start: copy_existing
    heartbeat: 1s
    # The projection keeps _id for the key: the document's own _id stays out of the payload.
    pipeline:
      - $unset: [fullDocument._id]
projections:
  - name: orders-view
    topic: orders
    collection: orders_view
    indexes: [{fields: [status]}, {fields: [total]}]
  - name: customers-view
    topic: customers
    collection: customers_view
views:
  - name: orders
    projection: orders-view
    filters: {status: string, total: number}
  - name: customers
    projection: customers-view
`, strings.Join(urls, ", "), s.mongoURI(), s.db)
}

// proc is one bridge, projector or counter process, named bridge-1, projector-2, counter-1, ….
type proc struct {
	*embeddedtest.Process
	s    *stack
	kind string // bridge, projector or counter
	addr string // ops endpoints
	api  string // the snapshot API (projectors)
}

// counterArgs run examples/counter on the stack: orders counted into e2e.order_counts, logged
// in as the projector user (a Go projection of your own needs what the projector needs).
func (s *stack) counterArgs() []string {
	return []string{"--nats-url", s.urlsAs(userProjector), "--inbox-prefix", inboxPrefixes[userProjector],
		"--mongo-uri", s.mongoURI(), "--database", s.db,
		"--topic", "orders", "--name", "orders-counts", "--collection", "order_counts"}
}

// startProc starts a bridge, projector or counter process and waits until it is ready.
func (s *stack) startProc(kind string) *proc {
	s.t.Helper()
	s.mu.Lock()
	s.counter[kind]++
	name := fmt.Sprintf("%s-%d", kind, s.counter[kind])
	s.mu.Unlock()
	// The output is kept in memory for polling and in a file.
	f, err := os.Create(filepath.Join(s.dir, name+".log"))
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = f.Close() }) // after the process is gone: cleanups run last first
	var cmd *exec.Cmd
	if kind == "counter" {
		cmd = exec.Command(filepath.Join(s.bin, kind), s.counterArgs()...)
	} else {
		cmd = exec.Command(filepath.Join(s.bin, kind), "run", "--config", s.config)
		cmd.Env = append(s.procEnv(kind), s.env...) // the user of the same name
	}
	cmd.Stdout, cmd.Stderr = f, f
	p := &proc{Process: embeddedtest.Start(s.t, name, cmd), s: s, kind: kind}
	if kind == "counter" {
		// No endpoints: running once its projection consumes.
		require.True(s.t, p.Await(60*time.Second, func(out string) bool { return hasLog(out, "counter running") }),
			"%s exited: %v\n%s", name, p.Err(), p.Output().Tail(40))
		s.mu.Lock()
		s.procs = append(s.procs, p)
		s.mu.Unlock()
		return p
	}
	p.Await(60*time.Second, func(out string) bool { p.addr = listenAddr(out); return p.addr != "" })
	require.NotEmpty(s.t, p.addr, "%s exited: %v\n%s", name, p.Err(), p.Output().Tail(40))
	p.api = p.addr
	if kind == "projector" {
		p.Await(60*time.Second, func(out string) bool { p.api = logAddr(out, "snapshot API listening"); return p.api != "" })
		require.NotEmpty(s.t, p.api, "%s exited: %v\n%s", name, p.Err(), p.Output().Tail(40))
	}
	var body string
	require.Eventually(s.t, func() bool {
		var code int
		code, body = p.get("/readyz")
		return code == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "%s ready: %s", name, &body)
	// Listed (for readers and faults) only once its addresses are known.
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// poll is embeddedtest.Poll.
var poll = embeddedtest.Poll

// get reads path from the ops endpoints, or from the snapshot API when path is under /v1/views.
func (p *proc) get(path string) (int, string) {
	resp, err := httpClient.Get(p.url(path))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// url is where path is served: the snapshot API (/v1/views, /v1/topics) or the ops endpoints.
func (p *proc) url(path string) string {
	if strings.HasPrefix(path, "/v1/views") || strings.HasPrefix(path, "/v1/topics") {
		return "http://" + p.api + path
	}
	return "http://" + p.addr + path
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// running returns the live processes of kind.
func (s *stack) running(kind string) []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proc
	for _, p := range s.procs {
		if p.kind == kind && !p.Exited() {
			out = append(out, p)
		}
	}
	return out
}

// listenAddr finds the address in the "ops server listening" log line.
func listenAddr(logs string) string { return logAddr(logs, "ops server listening") }

// hasLog says whether a log line has message msg.
func hasLog(logs, msg string) bool { return strings.Contains(logs, `"msg":"`+msg+`"`) }

// logAddr finds the address in the first log line with message msg.
var logAddr = embeddedtest.LogAddr
