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
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Checks decide /readyz, in order; each gets at most CheckTimeout.
	Checks func() []Check
	// Status serves /v1/ops/status.
	Status func(ctx context.Context) (*Status, error)
}

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
	if e.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(e.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /v1/ops/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if e.Status == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(errorBody("unavailable", "no status yet"))
			return
		}
		st, err := e.Status(r.Context())
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(errorBody("unavailable", err.Error()))
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	return mux
}

// errorBody is the project's one error shape: {"error":{"code","message"}}.
func errorBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}
