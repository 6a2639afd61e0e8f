package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

// TestClosedByDefault: a process listening beyond loopback without auth refuses to start
// and says what to do; with auth.open it starts and warns.
func TestClosedByDefault(t *testing.T) {
	code, _, errOut := runArgs(t, "run", "--http-addr", "0.0.0.0:0")
	assert.Equal(t, 2, code, "a flag's value is a usage error: %s", errOut)
	assert.Contains(t, errOut, "flag --http-addr: http.addr: 0.0.0.0:0 listens beyond loopback without auth")
	assert.Contains(t, errOut, "auth.open: true")
	everywhere := t.TempDir() + "/everywhere.yaml"
	require.NoError(t, os.WriteFile(everywhere, []byte("http: {addr: \":8080\", api_addr: \"[::]:8090\"}\n"), 0o644))
	code, _, errOut = runArgs(t, "run", "--config", everywhere)
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "http.addr: :8080 listens beyond loopback without auth")
	assert.Contains(t, errOut, "http.api_addr: [::]:8090 listens beyond loopback without auth")

	open := t.TempDir() + "/open.yaml"
	require.NoError(t, os.WriteFile(open, []byte("auth: {open: true}\n"), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var logs bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", open, "--http-addr", "0.0.0.0:0", "--nats-url", "nats://127.0.0.1:1"},
			&bytes.Buffer{}, writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }))
	}()
	require.True(t, embeddedtest.Poll(30*time.Second, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "ops server listening")
	}))
	cancel()
	assert.Equal(t, 0, <-done)
	mu.Lock()
	defer mu.Unlock()
	assert.Regexp(t, `"level":"WARN","msg":"auth.open: views, /v1/ops/status and /metrics are served without authentication`, logs.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
