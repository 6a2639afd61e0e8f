package process_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
)

// readyFake is a component that is not ready until told.
type readyFake struct{ ready atomic.Bool }

func (f *readyFake) Name() string                  { return "slow-start" }
func (f *readyFake) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *readyFake) Ready(context.Context) error {
	if !f.ready.Load() {
		return errors.New("warming up")
	}
	return nil
}

// TestReadyWaitsForComponents: /readyz lists the components check from the start (failing
// while setup runs) and answers 200 only once every component is ready, however setup and
// the probe interleave; a handler mounted with Env.Handle is served beside the operations
// endpoints.
func TestReadyWaitsForComponents(t *testing.T) {
	s := embeddedtest.NATS(t)
	cfg, err := config.Load(config.Options{Environ: []string{"JETBUS_NATS_URLS=" + s.ClientURL(), "JETBUS_HTTP_ADDR=127.0.0.1:0"}})
	require.NoError(t, err)
	comp := &readyFake{}
	release := make(chan struct{})
	addr := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- process.Run(ctx, process.Spec{Name: "bridge", Config: cfg, Logger: embeddedtest.Logger(t),
			Listening: func(a string) { addr <- a },
			Setup: func(ctx context.Context, env *process.Env) ([]process.Component, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				env.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "mounted "+r.URL.Path)
				}))
				return []process.Component{comp}, nil
			}})
	}()
	base := "http://" + <-addr
	getPath := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func() (int, string) { return getPath("/readyz") }
	var code int
	var body string
	require.Eventually(t, func() bool { code, body = get(); return strings.Contains(body, "[+]nats ok") }, 10*time.Second, 10*time.Millisecond, "connects")
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, "[-]components", "listed while setup runs")
	code, _ = getPath("/v1/views/orders/o-1")
	assert.Equal(t, http.StatusNotFound, code, "nothing mounted yet")
	close(release)
	require.Eventually(t, func() bool { _, body = get(); return strings.Contains(body, "[+]setup ok") }, 10*time.Second, 10*time.Millisecond)
	code, body = get()
	assert.Equal(t, http.StatusServiceUnavailable, code, "set up but a component is not ready: %s", body)
	code, body = getPath("/v1/views/orders/o-1")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "mounted /v1/views/orders/o-1", body, "Env.Handle serves beside the operations endpoints")
	code, _ = getPath("/healthz")
	assert.Equal(t, http.StatusOK, code, "the operations endpoints keep their paths")
	comp.ready.Store(true)
	require.Eventually(t, func() bool { code, _ := get(); return code == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
