package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness condition: nil when met.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

// Endpoints are the handlers of the operations server.
type Endpoints struct {
	// Gatherer serves /metrics, with jetbus_group_lag_seconds (GroupLagSeconds) read from
	// the status when Status is set, and jetbus_ready (Ready) from Checks when set.
	Gatherer prometheus.Gatherer
	// Checks decide /readyz, in order; each gets at most CheckTimeout.
	Checks func() []Check
	// Status serves /v1/ops/status. Its answer is cached for StatusTTL and computed by one
	// request at a time: a crowd polling the status costs one computation per StatusTTL.
	Status func(ctx context.Context) (*Status, error)
	// Guard, if set, wraps /metrics and /v1/ops/status (access control); /healthz and
	// /readyz stay open for orchestrators' probes.
	Guard func(http.Handler) http.Handler
}

// StatusTTL is how long an answer of /v1/ops/status is served again before it is recomputed.
const StatusTTL = time.Second

// CheckTimeout bounds each readiness check.
const CheckTimeout = 2 * time.Second

// Handler returns the mux of /healthz, /readyz, /metrics and /v1/ops/status.
//
// /healthz answers 200 while the process serves HTTP. /readyz answers 200 when every check
// passes and 503 otherwise, with one line per check ("[+]nats ok", "[-]jetstream failed:
// …"), as Kubernetes components do. /v1/ops/status answers the Status as JSON.
func (e Endpoints) Handler() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		ok := true
		var checks []Check
		if e.Checks != nil {
			checks = e.Checks()
		}
		for _, c := range checks {
			ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
			err := c.Func(ctx)
			cancel()
			if err != nil {
				ok = false
				body = fmt.Appendf(body, "[-]%s failed: %v\n", c.Name, err)
			} else {
				body = fmt.Appendf(body, "[+]%s ok\n", c.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			body = append(body, "readyz check failed\n"...)
		} else {
			body = append(body, "readyz check passed\n"...)
		}
		_, _ = w.Write(body)
	})
	guard := e.Guard
	if guard == nil {
		guard = func(h http.Handler) http.Handler { return h }
	}
	status := newStatusCache(e.Status)
	if e.Gatherer != nil {
		g := e.Gatherer
		if e.Status != nil || e.Checks != nil {
			own := prometheus.NewRegistry()
			if e.Status != nil {
				own.MustRegister(newLagCollector(status))
			}
			if e.Checks != nil {
				own.MustRegister(newReadyCollector(e.Checks))
			}
			g = prometheus.Gatherers{e.Gatherer, own}
		}
		mux.Handle("GET /metrics", guard(promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
	}
	mux.Handle("GET /v1/ops/status", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if e.Status == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(errorBody("unavailable", "no status yet"))
			return
		}
		st, err := status.get(r.Context())
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(errorBody("unavailable", err.Error()))
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})))
	return mux
}

// errorBody is the project's one error shape: {"error":{"code","message"}}.
func errorBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

// statusCache computes the status at most once per StatusTTL, one request at a time; the
// others wait for that computation (or their own context) and share its answer.
type statusCache struct {
	compute func(ctx context.Context) (*Status, error)
	turn    chan struct{} // a token: held while reading or computing
	at      time.Time
	st      *Status
	err     error
}

func newStatusCache(compute func(ctx context.Context) (*Status, error)) *statusCache {
	return &statusCache{compute: compute, turn: make(chan struct{}, 1)}
}

func (c *statusCache) get(ctx context.Context) (*Status, error) {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.turn }()
	if c.at.IsZero() || time.Since(c.at) >= StatusTTL {
		c.st, c.err = c.compute(ctx)
		c.at = time.Now()
		if c.err != nil && ctx.Err() != nil { // this caller gave up: not an answer to share
			c.at = time.Time{}
		}
	}
	return c.st, c.err
}
