package cmdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

// TestIngressProcess: `bridge run` with topics open to ingress serves plain NATS clients
// (a request is answered with the stored event, the service answers $SRV.PING, its metrics
// are on /metrics), and on SIGTERM it stores every message NATS had already handed it before
// exiting 0.
func TestIngressProcess(t *testing.T) {
	bin := binaries(t, "")
	s := embeddedtest.NATS(t)
	cfg := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, writeFile(cfg, "topics:\n  - name: orders\n    partitions: 4\ningress:\n  allow: [orders]\n"))
	p := start(t, filepath.Join(bin, "bridge"), "run", "--config", cfg, "--nats-url", s.ClientURL(), "--http-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	m := nats.NewMsg("in.orders")
	m.Data = []byte(`{"id":1}`)
	m.Header.Set("x-key", "o-1")
	resp, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var r struct {
		ID        string `json:"id"`
		Partition int    `json:"partition"`
		Seq       uint64 `json:"seq"`
	}
	require.NoError(t, json.Unmarshal(resp.Data, &r), "%s", resp.Data)
	assert.Equal(t, uint64(1), r.Seq)
	_, err = nc.Request("$SRV.PING.jetbus-ingress", nil, 10*time.Second)
	require.NoError(t, err, "the service answers PING")
	_, metrics := p.get("/metrics")
	assert.Contains(t, metrics, `ingress_accepted_total{topic="orders"} 1`)

	const n = 20_000
	for i := range n {
		require.NoError(t, nc.Publish("in.orders", fmt.Appendf(nil, `{"id":%d}`, i+2)))
	}
	require.NoError(t, nc.Flush()) // the server has routed them all to the bridge
	code, _ := p.Stop(syscall.SIGTERM, 30*time.Second)
	assert.Equal(t, 0, code, "stderr:\n%s", p.stderr)

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), "orders")
	require.NoError(t, err)
	assert.Equal(t, uint64(n+1), st.CachedInfo().State.Msgs, "every message handed to the bridge before SIGTERM is stored")
	assert.Contains(t, p.stderr.String(), `"msg":"ingress stopped"`)
}
