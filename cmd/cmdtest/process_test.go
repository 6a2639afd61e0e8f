package cmdtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
)

const exampleConfig = "../../examples/jetbus.yaml"

// proc is a binary running as a process; stdout and stderr hold each of its streams alone.
type proc struct {
	*embeddedtest.Process
	stdout, stderr *embeddedtest.SyncBuffer
	addr           string
}

// start starts bin and waits for it to log its ops address.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{stdout: &embeddedtest.SyncBuffer{}, stderr: &embeddedtest.SyncBuffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	p.Process = embeddedtest.Start(t, filepath.Base(bin), cmd)
	p.Await(30*time.Second, func(string) bool {
		p.addr = embeddedtest.LogAddr(p.stderr.String(), "ops server listening")
		return p.addr != ""
	})
	require.NotEmpty(t, p.addr, "%s logs its ops address; exited: %v\n%s", p.Name, p.Err(), p.stderr)
	return p
}

func (p *proc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProcesses: both binaries start from the example configuration against an embedded
// NATS and the MongoDB test backend, report ready, serve the seeds' metrics and the status,
// and exit 0 on SIGTERM within the shutdown deadline.
func TestProcesses(t *testing.T) {
	bin := binaries(t, "")
	s := embeddedtest.NATS(t)
	mongo := embeddedtest.MongoURI(t)
	common := []string{"run", "--config", exampleConfig, "--nats-url", s.ClientURL(), "--mongo-uri", mongo, "--http-addr", "127.0.0.1:0"}
	bridge := start(t, filepath.Join(bin, "bridge"), common...)
	projector := start(t, filepath.Join(bin, "projector"), common...)

	for _, p := range []*proc{bridge, projector} {
		var body string
		require.Eventually(t, func() bool {
			var code int
			code, body = p.get("/readyz")
			return code == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "%s ready: %s", p.Name, body)
		for _, check := range []string{"[+]nats ok", "[+]jetstream ok", "[+]mongo ok", "[+]setup ok", "[+]components ok"} {
			assert.Contains(t, body, check, p.Name)
		}
		code, body := p.get("/healthz")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "ok\n", body)
	}

	_, metrics := bridge.get("/metrics")
	for _, want := range []string{`events_published_total{topic="orders"} 0`, `events_published_total{topic="customers"} 0`, "go_goroutines", "process_resident_memory_bytes"} {
		assert.Contains(t, metrics, want, "bridge /metrics")
	}
	_, metrics = projector.get("/metrics")
	for _, name := range []string{"events_published_total", "events_delivered_total", "events_acked_total", "events_nacked_total",
		"events_inflight", "delivery_handler_duration_ms", "subscribe_poll_duration_ms"} {
		assert.Contains(t, metrics, "# HELP "+name+" ", "projector /metrics")
	}
	assert.Contains(t, metrics, `events_delivered_total{group="orders-view",topic="orders"} 0`)

	code, body := bridge.get("/v1/ops/status")
	require.Equal(t, http.StatusOK, code, body)
	var st ops.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, "bridge", st.Process)
	names := map[string]int{}
	for _, tp := range st.Topics {
		names[tp.Name] = tp.Partitions
	}
	assert.Equal(t, map[string]int{"orders": 4, "customers": 2}, names, "the configured topics, ensured")
	comps := map[string]ops.ComponentStatus{}
	for _, c := range st.Components {
		c.Detail = nil
		comps[c.Name] = c
	}
	assert.Equal(t, ops.ComponentStatus{Name: "dlq/sweeper", State: "running", Ready: true}, comps["dlq/sweeper"])
	assert.True(t, comps["changefeed/customers-cdc"].Ready, "the example's changefeed runs: %+v", comps)
	assert.Equal(t, ops.ComponentStatus{Name: "ingress/in", State: "running", Ready: true}, comps["ingress/in"], "the example opens orders to ingress")
	require.Len(t, st.Groups, 1)
	assert.Equal(t, "orders-view", st.Groups[0].Group, "the declared projection's group")
	assert.True(t, st.DLQ.Exists)
	assert.Contains(t, bridge.stderr.String(), `"msg":"schema","topic":"orders","version":1`, "the schemas dir was pushed")

	for _, p := range []*proc{bridge, projector} {
		code, took := p.Stop(syscall.SIGTERM, 30*time.Second)
		assert.Equal(t, 0, code, "%s exit status; stderr:\n%s", p.Name, p.stderr)
		assert.Less(t, took, 5*time.Second, "%s: nothing to drain, so well within shutdown.timeout", p.Name)
		assert.Contains(t, p.stderr.String(), `"msg":"stopped"`)
	}
}

// TestProcessRefusesBadConfig: a bad configuration is refused at start, before connecting,
// with every error's file, line and key path.
func TestProcessRefusesBadConfig(t *testing.T) {
	bin := binaries(t, "")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, writeFile(bad, "topics:\n  - name: orders\n    partitions: many\ningress:\n  allow: [refunds]\n"))
	cmd := exec.Command(filepath.Join(bin, "bridge"), "run", "--config", bad)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Equal(t, 1, cmd.ProcessState.ExitCode())
	assert.Contains(t, string(out), bad+`:3:5: topics[0].partitions: want an integer, got "many"`)
	assert.Contains(t, string(out), bad+`:5:11: ingress.allow[0]: topic "refunds" is not declared in topics`)
}

// TestDevMode: a dev build's --dev starts NATS and the MongoDB test backend in the process,
// where the configuration says they are; a production build refuses --dev and says how to get
// it.
func TestDevMode(t *testing.T) {
	prod := binaries(t, "")
	cmd := exec.Command(filepath.Join(prod, "bridge"), "run", "--dev", "--config", exampleConfig)
	out, _ := cmd.CombinedOutput()
	assert.Equal(t, 2, cmd.ProcessState.ExitCode())
	assert.Contains(t, string(out), "--dev needs a dev build")
	assert.Contains(t, string(out), "make dev")

	dev := binaries(t, "dev")
	natsPort, mongoPort := freePort(t), freePort(t)
	p := start(t, filepath.Join(dev, "bridge"), "run", "--dev", "--dev-dir", t.TempDir(), "--config", exampleConfig,
		"--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		"--mongo-uri", fmt.Sprintf("mongodb://127.0.0.1:%d/?replicaSet=rs0&directConnection=true", mongoPort),
		"--http-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	assert.Contains(t, p.stdout.String(), fmt.Sprintf("dev mode: NATS nats://127.0.0.1:%d", natsPort))
	nc := embeddedtest.Connect(t, fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	assert.True(t, nc.IsConnected(), "the embedded NATS serves other clients")
	code, _ := p.Stop(syscall.SIGTERM, 30*time.Second)
	assert.Equal(t, 0, code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
