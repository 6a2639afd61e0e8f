package wiring_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
)

// running is a process started in this test process by process.Run, as the binaries run it.
type running struct {
	base string // http://<ops address>
	stop func() error
}

// start loads yamlText (written to dir, with NATS, MongoDB and a free loopback address
// from the environment), builds the process with build and runs it until the test ends or
// stop is called; it returns once /readyz answers 200.
func start(t *testing.T, build func(*config.Config) (process.Spec, error), dir, yamlText string, environ ...string) *running {
	t.Helper()
	file := filepath.Join(dir, "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yamlText), 0o644))
	cfg, err := config.Load(config.Options{File: file, Environ: append([]string{"JETBUS_HTTP_ADDR=127.0.0.1:0"}, environ...)})
	require.NoError(t, err)
	spec, err := build(cfg)
	require.NoError(t, err)
	spec.Config, spec.Logger = cfg, embeddedtest.Logger(t)
	addr := make(chan string, 1)
	spec.Listening = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- process.Run(ctx, spec) }()
	var r *running
	stopped := false
	r = &running{base: "http://" + <-addr, stop: func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}}
	t.Cleanup(func() { _ = r.stop() })
	require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
		resp, err := http.Get(r.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}), "the process is ready")
	return r
}
