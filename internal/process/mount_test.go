package process_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
)

// mounting runs a process whose Setup mounts a handler (Spec.Mounts) once release is
// closed; arrived gets each request for /v1/x as the server takes it. It returns the
// operations address and the process's end.
func mounting(t *testing.T, ctx context.Context, timeout string, release <-chan struct{}, arrived chan<- struct{}) (string, <-chan error) {
	t.Helper()
	s := embeddedtest.NATS(t)
	cfg, err := config.Load(config.Options{Environ: []string{"JETBUS_NATS_URLS=" + s.ClientURL(), "JETBUS_HTTP_ADDR=127.0.0.1:0",
		"JETBUS_HTTP_REQUEST_TIMEOUT=" + timeout}})
	require.NoError(t, err)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- process.Run(ctx, process.Spec{Name: "projector", Config: cfg, Logger: embeddedtest.Logger(t), Mounts: true,
			Listening: func(a string) { addr <- a },
			Streams: func(r *http.Request) bool {
				if r.URL.Path == "/v1/x" {
					arrived <- struct{}{}
				}
				return false
			},
			Setup: func(ctx context.Context, env *process.Env) ([]process.Component, error) {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				env.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "mounted "+r.URL.Path)
				}))
				return nil, nil
			}})
	}()
	return "http://" + <-addr, done
}

type answer struct {
	code        int
	body, retry string
	err         error
}

func getAnswer(url string) answer {
	resp, err := http.Get(url)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: string(b), retry: resp.Header.Get("Retry-After")}
}

// TestMountedPathsWaitForSetup: with Spec.Mounts, a request for a mounted path that comes
// while the process sets up waits for the handler and is served by it (a browser's
// EventSource reconnecting during a projector restart gets its stream, where a 404 would
// end it for good); one that waits longer than http.request_timeout is a 503 with
// Retry-After, and so is one still waiting when the process stops.
func TestMountedPathsWaitForSetup(t *testing.T) {
	t.Run("served once mounted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		release, arrived := make(chan struct{}), make(chan struct{}, 4)
		base, done := mounting(t, ctx, "1s", release, arrived)

		a := getAnswer(base + "/v1/x")
		require.NoError(t, a.err)
		assert.Equal(t, http.StatusServiceUnavailable, a.code, "waited http.request_timeout for setup: %s", a.body)
		assert.Equal(t, "1", a.retry)
		assert.Contains(t, a.body, "the process is starting")
		<-arrived

		answered := make(chan answer, 1)
		go func() { answered <- getAnswer(base + "/v1/x") }()
		<-arrived // the server has the request, setup has not mounted the handler
		close(release)
		a = <-answered
		require.NoError(t, a.err)
		assert.Equal(t, http.StatusOK, a.code)
		assert.Equal(t, "mounted /v1/x", a.body, "served by the handler mounted meanwhile")
		cancel()
		require.NoError(t, <-done)
	})
	t.Run("stopped before mounting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		arrived := make(chan struct{}, 1)
		base, done := mounting(t, ctx, "1m", make(chan struct{}), arrived)
		answered := make(chan answer, 1)
		go func() { answered <- getAnswer(base + "/v1/x") }()
		<-arrived
		cancel()
		a := <-answered
		require.NoError(t, a.err, "answered, not cut when the server closes")
		assert.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
		assert.Contains(t, a.body, "the process stopped")
		<-done
	})
}
