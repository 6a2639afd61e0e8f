package ops_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/jetstream"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestReadyz(t *testing.T) {
	cases := []struct {
		name   string
		checks []ops.Check
		code   int
		body   string
		metric []string // jetbus_ready's series on /metrics
	}{
		{"all pass", []ops.Check{{"nats", func(context.Context) error { return nil }}, {"setup", func(context.Context) error { return nil }}},
			200, "[+]nats ok\n[+]setup ok\nreadyz check passed\n", []string{`jetbus_ready{check="nats"} 1`, `jetbus_ready{check="setup"} 1`}},
		{"one fails", []ops.Check{{"nats", func(context.Context) error { return nil }}, {"mongo", func(context.Context) error { return errors.New("no primary") }}},
			503, "[+]nats ok\n[-]mongo failed: no primary\nreadyz check failed\n", []string{`jetbus_ready{check="nats"} 1`, `jetbus_ready{check="mongo"} 0`}},
		{"a check that hangs is cut short", []ops.Check{{"jetstream", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}},
			503, "[-]jetstream failed: context deadline exceeded\nreadyz check failed\n", []string{`jetbus_ready{check="jetstream"} 0`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(ops.Endpoints{Gatherer: prometheus.NewRegistry(), Checks: func() []ops.Check { return tc.checks }}.Handler())
			defer srv.Close()
			code, body := get(t, srv.URL+"/readyz")
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.body, body)
			_, body = get(t, srv.URL+"/metrics")
			for _, m := range tc.metric {
				assert.Contains(t, body, m)
			}
			code, body = get(t, srv.URL+"/healthz")
			assert.Equal(t, 200, code, "alive whatever readiness says")
			assert.Equal(t, "ok\n", body)
		})
	}
}

func TestStatusUnavailable(t *testing.T) {
	srv := httptest.NewServer(ops.Endpoints{Status: func(context.Context) (*ops.Status, error) { return nil, errors.New("connecting to NATS") }}.Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/v1/ops/status")
	assert.Equal(t, 503, code)
	assert.JSONEq(t, `{"error":{"code":"unavailable","message":"connecting to NATS"}}`, body)
}

// TestMetricsSeeded: the Bus's metrics carry the seeds' names, with a zero series for every
// declared topic and group before any event; vectors with other labels are left alone.
func TestMetricsSeeded(t *testing.T) {
	s := embeddedtest.NATS(t)
	reg := ops.NewRegistry()
	seeded := ops.Seed(reg, []string{"orders"}, []ops.GroupRef{{Topic: "orders", Group: "orders-view"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bus, err := jetstream.Open(ctx, embeddedtest.Connect(t, s.ClientURL()), jetstream.WithRegisterer(seeded))
	require.NoError(t, err)
	defer bus.Close()
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingress_rejected_total", Help: "x"}, []string{"topic", "code"})
	seeded.MustRegister(other)

	srv := httptest.NewServer(ops.Endpoints{Gatherer: reg}.Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, 200, code)
	for _, want := range []string{
		`events_published_total{topic="orders"} 0`,
		`events_delivered_total{group="orders-view",topic="orders"} 0`,
		`events_acked_total{group="orders-view",topic="orders"} 0`,
		`events_nacked_total{group="orders-view",topic="orders"} 0`,
		`events_inflight{group="orders-view",topic="orders"} 0`,
		`delivery_handler_duration_ms_count{group="orders-view",topic="orders"} 0`,
		`subscribe_poll_duration_ms_count{group="orders-view",topic="orders"} 0`,
		"go_goroutines ", "process_cpu_seconds_total ",
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "ingress_rejected_total", "no series made up for labels it does not know")

	_, err = bus.Publish(ctx, "orders", map[string]int{"n": 1})
	require.Error(t, err, "no such topic yet")
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders"}))
	_, err = bus.Publish(ctx, "orders", map[string]int{"n": 1})
	require.NoError(t, err)
	_, body = get(t, srv.URL+"/metrics")
	assert.True(t, strings.Contains(body, `events_published_total{topic="orders"} 1`), "the seeded series counts")
}

// TestStatusComputedOncePerTTL: a crowd asking for /v1/ops/status at once costs one
// computation; the others share its answer.
func TestStatusComputedOncePerTTL(t *testing.T) {
	var computed atomic.Int32
	release := make(chan struct{})
	e := ops.Endpoints{Status: func(ctx context.Context) (*ops.Status, error) {
		computed.Add(1)
		<-release
		return &ops.Status{Process: "p"}, nil
	}}
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make(chan int, 50)
	for range 50 {
		wg.Go(func() {
			resp, err := http.Get(srv.URL + "/v1/ops/status")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	require.True(t, embeddedtest.Poll(5*time.Second, time.Millisecond, func() bool { return computed.Load() == 1 }))
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		assert.Equal(t, http.StatusOK, c)
	}
	assert.Equal(t, int32(1), computed.Load(), "one computation for the crowd")
}
