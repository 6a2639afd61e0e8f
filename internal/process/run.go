package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/jetstream"
)

// Spec is one process: its name, configuration, and what it sets up once connected.
type Spec struct {
	// Name is "bridge" or "projector": the NATS connection name, the MongoDB app name, and
	// the process in /v1/ops/status.
	Name   string
	Config *config.Config
	// Logger nil discards.
	Logger *slog.Logger
	// NeedsMongo connects to MongoDB and makes its reachability a readiness check.
	NeedsMongo bool
	// Topics are the declared topics: their metric series exist from the start and
	// /v1/ops/status lists them.
	Topics []string
	// Groups are the consumer groups the process runs: their metric series exist from the
	// start and /v1/ops/status lists them before their first member joins.
	Groups []ops.GroupRef
	// Listed are more groups /v1/ops/status lists (the declared projections', in both
	// processes, as `bridge status` does).
	Listed []ops.GroupRef
	// Setup runs once connected (ensure topics, push schemas, open queues) and returns the
	// components to run. It is called again while it fails with a transient error (NATS or
	// MongoDB unavailable), so it must be idempotent; another error ends the process.
	Setup func(ctx context.Context, env *Env) ([]Component, error)
	// Listening, if set, is called with the operations server's address once it listens.
	Listening func(addr string)
	// OpsGuard, if set, wraps /metrics and /v1/ops/status: access control for the
	// operations endpoints (package wiring sets it from the auth section).
	OpsGuard func(http.Handler) http.Handler
	// Streams, if set, tells the long-lived requests of the process's HTTP servers
	// (Limits.Streams).
	Streams func(*http.Request) bool
	// Mounts says that Setup mounts a handler on the operations address (Env.Handle): until
	// it does, a request for a path the operations endpoints do not take waits for it, at
	// most http.request_timeout (then 503 with Retry-After), instead of a 404. A client that
	// comes back while the process restarts is served once it can be: a browser's
	// EventSource, which gives up for good on any answer but 200, reconnects then.
	Mounts bool
	// Tracing is the process's OpenTelemetry tracing (package wiring maps the tracing
	// section; the zero value is off). Run starts it before anything connects and flushes
	// it last, after every component stopped and everything closed.
	Tracing tracing.Config
	// BaggageKeys are the W3C baggage keys the process's events may carry
	// (jetstream.WithBaggageKeys).
	BaggageKeys []string
}

// Env is what Setup gets: the connections, the metrics registerer and the logger.
type Env struct {
	Config *config.Config
	Logger *slog.Logger
	// Metrics registers a component's metrics on the process's /metrics.
	Metrics prometheus.Registerer
	Conn    *nats.Conn
	Bus     *jetstream.Bus
	// Mongo is nil unless Spec.NeedsMongo.
	Mongo *mongo.Client
	// Tracer is the provider the components trace with: the SDK's when Spec.Tracing is on, a
	// no-op one (which the libraries skip at no cost) otherwise.
	Tracer trace.TracerProvider

	baggageKeys []string

	mu      sync.Mutex
	closers []func(context.Context) error
	handler atomic.Pointer[http.Handler]
	// mounted is closed by the first Handle when Spec.Mounts (nil otherwise); ended when
	// the process stopped running, so that no request waits for a handler any more.
	mounted   chan struct{}
	mountOnce sync.Once
	ended     chan struct{}

	limits Limits       // the http section's bounds
	conns  *connCount   // open connections of all the process's listeners
	http   *httpMetrics // what the bounds refused
}

// Handle serves h on the operations address (http.addr) for every path the operations
// endpoints do not take (/healthz, /readyz, /metrics, /v1/ops/…): the projector's snapshot
// API shares the port this way. Until a handler is set, those paths wait for it when the
// process said it mounts one (Spec.Mounts), and answer 404 otherwise. A later call replaces
// the handler.
func (e *Env) Handle(h http.Handler) {
	e.handler.Store(&h)
	if e.mounted != nil {
		e.mountOnce.Do(func() { close(e.mounted) })
	}
}

// serveMounted is the operations server's fallback: the handler set with Handle, once
// there is one (Spec.Mounts), or 404.
func (e *Env) serveMounted(w http.ResponseWriter, r *http.Request) {
	h := e.handler.Load()
	if h == nil && e.mounted != nil {
		wait := time.NewTimer(e.limits.withDefaults().RequestTimeout)
		defer wait.Stop()
		select {
		case <-e.mounted:
			h = e.handler.Load()
		case <-wait.C:
			writeOverloaded(w, "the process is starting: try again")
			return
		case <-e.ended:
			writeOverloaded(w, "the process stopped before it served this path")
			return
		case <-r.Context().Done():
			return
		}
	}
	if h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.NotFound(w, r)
}

// BusOptions are the options every Bus of the process is opened with: its tracer provider
// and the baggage keys its events may carry.
func (e *Env) BusOptions() []jetstream.Option {
	return []jetstream.Option{jetstream.WithTracerProvider(e.Tracer), jetstream.WithBaggageKeys(e.baggageKeys...)}
}

// OnClose registers f to run after every component stopped (last registered, first run).
func (e *Env) OnClose(f func(context.Context) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closers = append(e.closers, f)
}

// setupPolicy retries setup steps while NATS or MongoDB is unavailable, until ctx ends.
var setupPolicy = retry.Policy{Try: 10 * time.Second, Backoff: retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}

// Run runs the process until ctx is done, then shuts it down gracefully within
// Config.Shutdown.Timeout (see the package doc). It returns nil after a clean shutdown,
// ErrShutdownTimeout when components did not stop in time, or what made the process fail.
func Run(ctx context.Context, spec Spec) error {
	cfg := spec.Config
	log := spec.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	topics := spec.Topics
	groups := append([]ops.GroupRef(nil), spec.Groups...)
	for _, g := range spec.Listed {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	reg := ops.NewRegistry()
	env := &Env{Config: cfg, Logger: log, Metrics: ops.Seed(reg, topics, spec.Groups), limits: limitsOf(cfg),
		baggageKeys: spec.BaggageKeys, ended: make(chan struct{})}
	env.limits.Streams = spec.Streams
	if spec.Mounts {
		env.mounted = make(chan struct{})
	}
	tp, err := tracing.Start(ctx, spec.Tracing, log)
	if err != nil {
		return err
	}
	env.Tracer = tp.TracerProvider()
	// Registered first, so it runs last: the spans of the shutdown itself are exported too,
	// within the shutdown deadline. The deferred call covers a Run that fails before.
	env.OnClose(tp.Shutdown)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}()
	env.conns = &connCount{max: int64(env.limits.withDefaults().MaxConnections)}
	if env.http, err = newHTTPMetrics(env.Metrics); err != nil {
		return err
	}
	if cfg.Auth.Open && (!config.Loopback(cfg.HTTP.Addr) || cfg.HTTP.APIAddr != "" && !config.Loopback(cfg.HTTP.APIAddr)) {
		log.Warn("auth.open: views, /v1/ops/status and /metrics are served without authentication to anyone who reaches this address",
			"addr", cfg.HTTP.Addr, "api_addr", cfg.HTTP.APIAddr)
	}

	var (
		stopping  atomic.Bool
		phase     atomic.Value // string: what the process is doing before it runs
		connected atomic.Pointer[Env]
		runner    atomic.Pointer[Runner]
	)
	phase.Store("connecting to NATS")
	stopWatch := context.AfterFunc(ctx, func() { stopping.Store(true) })
	defer stopWatch()

	checks := func() []ops.Check {
		cs := []ops.Check{{Name: "shutdown", Func: func(context.Context) error {
			if stopping.Load() {
				return errors.New("shutting down")
			}
			return nil
		}}}
		e := connected.Load()
		if e == nil {
			return append(cs, ops.Check{Name: "setup", Func: func(context.Context) error { return errors.New(phase.Load().(string)) }})
		}
		cs = append(cs,
			ops.Check{Name: "nats", Func: func(context.Context) error {
				if s := e.Conn.Status(); s != nats.CONNECTED {
					return fmt.Errorf("connection %s", s)
				}
				return nil
			}},
			ops.Check{Name: "jetstream", Func: func(ctx context.Context) error {
				_, err := e.Bus.JetStream().AccountInfo(ctx)
				return err
			}},
		)
		if e.Mongo != nil {
			cs = append(cs, ops.Check{Name: "mongo", Func: func(ctx context.Context) error { return e.Mongo.Ping(ctx, readpref.Primary()) }})
		}
		cs = append(cs, ops.Check{Name: "setup", Func: func(context.Context) error {
			if runner.Load() == nil {
				return errors.New(phase.Load().(string))
			}
			return nil
		}})
		// Always listed, and the runner read when the check runs: setup may end between
		// building this list and running it, and readiness must then still wait for the
		// components.
		cs = append(cs, ops.Check{Name: "components", Func: func(ctx context.Context) error {
			r := runner.Load()
			if r == nil {
				return errors.New("not running yet")
			}
			return r.Ready(ctx)
		}})
		return cs
	}
	dlqCounts := &ops.DLQCounts{}
	status := func(ctx context.Context) (*ops.Status, error) {
		e := connected.Load()
		if e == nil {
			return nil, errors.New(phase.Load().(string))
		}
		st, err := ops.Collect(ctx, ops.Source{JS: e.Bus.JetStream(), Bus: e.Bus, Topics: topics, Groups: groups, DLQ: dlqCounts})
		if err != nil {
			return nil, err
		}
		st.Process = spec.Name
		if r := runner.Load(); r != nil {
			st.Components = r.Statuses(ctx, true)
		}
		return st, nil
	}

	ln, err := env.Listen(cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http.addr: %w", err)
	}
	mux := ops.Endpoints{Gatherer: reg, Checks: checks, Status: status, Guard: spec.OpsGuard}.Handler()
	mux.HandleFunc("/", env.serveMounted)
	srv := env.NewServer(mux)
	// The HTTP server goes last, so /readyz says "shutting down" while components drain.
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- Serve(serving, srv, ln, 2*time.Second) }()
	log.Info("ops server listening", "addr", ln.Addr().String())
	if spec.Listening != nil {
		spec.Listening(ln.Addr().String())
	}
	runErr := run(ctx, spec, env, log, &phase, &connected, &runner)
	close(env.ended)
	stopServing()
	if err := <-served; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("ops server: %w", err))
	}
	return runErr
}

// run connects, sets up and runs the components, then closes what setup opened.
func run(ctx context.Context, spec Spec, env *Env, log *slog.Logger, phase *atomic.Value,
	connected *atomic.Pointer[Env], runner *atomic.Pointer[Runner]) (err error) {
	cfg := spec.Config
	var stopAt atomic.Int64
	stopWatch := context.AfterFunc(ctx, func() { stopAt.Store(time.Now().UnixNano()) })
	defer stopWatch()
	// Whatever happens, close within the shutdown deadline counted from the signal (at least
	// a second for the connections).
	defer func() {
		deadline := time.Now().Add(cfg.Shutdown.Timeout)
		if at := stopAt.Load(); at != 0 {
			deadline = time.Unix(0, at).Add(cfg.Shutdown.Timeout)
			if least := time.Now().Add(time.Second); deadline.Before(least) {
				deadline = least
			}
		}
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		env.mu.Lock()
		closers := env.closers
		env.mu.Unlock()
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](cctx); cerr != nil {
				log.Warn("close", "error", cerr)
			}
		}
	}()

	nc, err := ConnectNATS(cfg.NATS, "jetbus "+spec.Name, true)
	if err != nil {
		return err
	}
	env.Conn = nc
	env.OnClose(func(context.Context) error { nc.Close(); return nil })

	attempt := func(what string, fn func(ctx context.Context) error) error {
		phase.Store(what)
		n := 0
		return retry.Do(ctx, setupPolicy, func(ctx context.Context) error {
			n++
			err := fn(ctx)
			if err != nil && retry.Transient(err) {
				log.Warn(what+": will retry", "attempt", n, "error", err)
			}
			return err
		})
	}
	err = attempt("connecting to JetStream", func(ctx context.Context) error {
		b, err := jetstream.Open(ctx, nc, append(env.BusOptions(), jetstream.WithRegisterer(env.Metrics), jetstream.WithLogger(log))...)
		env.Bus = b
		return err
	})
	if ctx.Err() != nil {
		return nil // stopped before running anything
	}
	if err != nil {
		return err
	}
	env.OnClose(func(context.Context) error { return env.Bus.Close() })
	if spec.NeedsMongo {
		m, err := ConnectMongo(cfg.Mongo, "jetbus "+spec.Name)
		if err != nil {
			return err
		}
		env.Mongo = m
		env.OnClose(func(ctx context.Context) error { return m.Disconnect(ctx) })
	}
	connected.Store(env)

	var comps []Component
	if spec.Setup != nil {
		err = attempt("setting up", func(ctx context.Context) error {
			var err error
			comps, err = spec.Setup(ctx, env)
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	r, err := NewRunner(log, comps...)
	if err != nil {
		return err
	}
	runner.Store(r)
	log.Info("running", "process", spec.Name, "components", len(comps))
	err = r.Run(ctx, cfg.Shutdown.Timeout)
	if err == nil {
		log.Info("stopped")
	}
	return err
}

// limitsOf reads the http section's bounds.
func limitsOf(cfg *config.Config) Limits {
	return Limits{MaxConnections: cfg.HTTP.MaxConnections, MaxRequests: cfg.HTTP.MaxRequests,
		IdleTimeout: cfg.HTTP.IdleTimeout, RequestTimeout: cfg.HTTP.RequestTimeout}
}
