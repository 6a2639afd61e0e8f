package cmdtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// TestMakeDev runs make dev's entry point (bin/dev/jetbus-dev, from the dev builds) on the
// example configuration, with its ports moved out of the way through the environment:
// it publishes an order through ingress with a raw NATS client, reads the order from the
// snapshot API over HTTP, then sends SIGTERM and checks every port is free within 5 s and
// the data directory survives.
func TestMakeDev(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the dev binaries")
	}
	bin := binaries(t, "dev")
	natsPort, mongoPort, bridgePort, projPort := freePort(t), freePort(t), freePort(t), freePort(t)
	data := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "jetbus-dev"), "--config", exampleConfig, "--data", data,
		"--bridge-http-addr", fmt.Sprintf("127.0.0.1:%d", bridgePort), "--projector-http-addr", fmt.Sprintf("127.0.0.1:%d", projPort))
	cmd.Env = append(os.Environ(),
		fmt.Sprintf("JETBUS_NATS_URLS=nats://127.0.0.1:%d", natsPort),
		fmt.Sprintf("JETBUS_MONGO_URI=mongodb://127.0.0.1:%d/?replicaSet=rs0&directConnection=true", mongoPort))
	stdout := &embeddedtest.SyncBuffer{} // stdout alone; Output has both streams
	cmd.Stdout = stdout
	p := embeddedtest.Start(t, "jetbus-dev", cmd)
	running := func(string) bool { return strings.Contains(stdout.String(), "jetbus is running") }
	require.True(t, p.Await(90*time.Second, running), "jetbus-dev becomes ready; exited: %v", p.Err())
	assert.Contains(t, stdout.String(), "req in.orders", "prints how to publish through ingress")
	assert.Contains(t, stdout.String(), fmt.Sprintf("curl -s http://127.0.0.1:%d/v1/views/orders/o-1", projPort), "prints how to read the view")

	// A raw NATS client, no jetbus package: request-reply through ingress.
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	require.NoError(t, err)
	defer nc.Close()
	msg := nats.NewMsg("in.orders")
	msg.Header.Set("x-key", "o-1")
	msg.Data = []byte(`{"id":"o-1","version":1,"customer":"c-1","status":"placed","total":42.5,"created":"2026-01-02T15:04:05Z"}`)
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	require.NoError(t, err)
	var ack struct {
		ID        string `json:"id"`
		Partition int    `json:"partition"`
		Seq       uint64 `json:"seq"`
		Error     any    `json:"error"`
	}
	require.NoError(t, json.Unmarshal(reply.Data, &ack), "%s", reply.Data)
	require.Nil(t, ack.Error, "%s", reply.Data)
	require.NotZero(t, ack.Seq)

	// Its effect over HTTP, read-your-writes on the position the reply gave.
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/views/orders/o-1?after=%d:%d&wait=5s", projPort, ack.Partition, ack.Seq)
	var body map[string]any
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body = nil
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil
	}, 30*time.Second, 50*time.Millisecond, "GET %s", url)
	assert.Equal(t, "placed", body["status"], "%v", body)
	assert.Equal(t, 42.5, body["total"], "%v", body)

	begin := time.Now()
	code, _ := p.Stop(syscall.SIGTERM, 60*time.Second)
	assert.Equal(t, 0, code, "exit status")
	for _, port := range []int{natsPort, mongoPort, bridgePort, projPort} {
		assert.Eventually(t, func() bool { return portFree(port) }, time.Until(begin.Add(5*time.Second))+time.Millisecond, 20*time.Millisecond,
			"port %d still held 5 s after SIGTERM", port)
	}
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "the dev data is kept for the next start")
}
