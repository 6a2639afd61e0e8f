package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/projection"
	"github.com/jetbus/jetbus/schema"
	"github.com/jetbus/jetbus/snapshotapi"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Projector returns the projector process for cfg: at start it ensures the declared topics;
// it runs one changelog projection per declared projection, as a replica of its group, and
// the snapshot API when views or http.topics are declared.
//
// Shared, each opened once: the NATS connection, the Bus and the MongoDB client
// (process.Run's), one schema registry (the projections' upcaster and the API's
// /openapi.json), one DLQ queue.
func Projector(cfg *config.Config) (process.Spec, error) {
	topics, listed := statusSource(cfg)
	guard, err := opsGuard(cfg)
	if err != nil {
		return process.Spec{}, err
	}
	serveAPI := len(cfg.Views) > 0 || len(cfg.HTTP.Topics) > 0
	// The API on the operations address: a request that comes while the process starts
	// waits for it (an EventSource reconnecting during a restart is answered, not refused).
	mounts := serveAPI && cfg.HTTP.APIAddr == ""
	spec := process.Spec{Name: "projector", NeedsMongo: len(cfg.Projections) > 0, Topics: topics, Groups: listed, Listed: listed,
		OpsGuard: guard, Streams: snapshotapi.IsWatch, Mounts: mounts, Tracing: tracingConfig(cfg, "projector"), BaggageKeys: cfg.Tracing.Baggage}
	spec.Setup = func(ctx context.Context, env *process.Env) (comps []process.Component, err error) {
		res := &resources{}
		defer res.closeOnError(&err) // Setup runs again after an error: leave nothing open behind
		if err := ensureTopics(ctx, env.Bus, cfg.Topics, env.Logger); err != nil {
			return nil, err
		}
		if len(cfg.Projections) == 0 && !serveAPI {
			return nil, nil
		}
		use := noDLQ
		if len(cfg.Projections) > 0 {
			use = attachDLQ
		}
		sh, err := openShared(ctx, env, res, use)
		if err != nil {
			return nil, err
		}
		opts := projectionOptions(env.Logger, env.Metrics, sh.reg, env.Tracer)
		for _, p := range cfg.Projections {
			c, err := projection.NewChangelog(env.Bus, env.Mongo, sh.q, projectionConfig(cfg, p), opts...)
			if err != nil {
				return nil, fmt.Errorf("projection %s: %w", p.Name, err)
			}
			comps = append(comps, c)
		}
		if serveAPI {
			api, err := apiComponent(ctx, sh)
			if err != nil {
				return nil, err
			}
			comps = append(comps, api)
		}
		env.OnClose(res.closeWith)
		return comps, nil
	}
	return spec, nil
}

// projectionOptions are what every projection of a process (or a rebuild) shares: the
// logger, metrics and tracer provider, and the registry's upcaster, so projections see every
// event in its topic's latest shape.
func projectionOptions(log *slog.Logger, metrics prometheus.Registerer, reg *schema.Registry, tp trace.TracerProvider) []projection.Option {
	return []projection.Option{projection.WithLogger(log), projection.WithRegisterer(metrics),
		projection.WithMiddlewares(reg.UpcastMiddleware()), projection.WithTracerProvider(tp)}
}

// apiComponent wires the snapshot API: the cursor key shared through NATS KV, the registry
// for /openapi.json, the Bus for keys of topics. It is served on the operations address
// (http.addr) beside /healthz and the other operations endpoints, or on a listener of its
// own when http.api_addr is set.
func apiComponent(ctx context.Context, sh *shared) (process.Component, error) {
	cfg, env := sh.env.Config, sh.env
	key, err := snapshotapi.LoadCursorKey(ctx, env.Bus.JetStream(), kvReplicas(cfg))
	if err != nil {
		return nil, err
	}
	ac, err := apiConfig(cfg, key)
	if err != nil {
		return nil, err
	}
	srv, err := snapshotapi.New(snapshotapi.Deps{Mongo: env.Mongo, Schemas: sh.reg, Keys: env.Bus}, ac,
		snapshotapi.WithLogger(env.Logger.With("component", apiName)), snapshotapi.WithRegisterer(env.Metrics),
		snapshotapi.WithTracerProvider(env.Tracer))
	if err != nil {
		return nil, err
	}
	if cfg.HTTP.APIAddr == "" {
		env.Handle(srv)
	}
	return &api{srv: srv, env: env, addr: cfg.HTTP.APIAddr, timeout: cfg.HTTP.RequestTimeout}, nil
}

// apiName is the snapshot API's component name.
const apiName = "snapshotapi/http"

// api serves the snapshot API on its own listener, when it has one, and keeps its cache live.
type api struct {
	srv     *snapshotapi.Server
	env     *process.Env
	addr    string
	timeout time.Duration
}

func (c *api) Name() string { return apiName }

// Ready reports the API's readiness (sort fields backed by indexes).
func (c *api) Ready(ctx context.Context) error { return c.srv.Ready(ctx) }

// Run keeps the API's cache live until ctx ends. With http.api_addr it also listens there
// and serves until ctx ends, then lets requests in flight finish (at most the request
// timeout); otherwise the operations server serves it.
func (c *api) Run(ctx context.Context) error {
	if c.addr == "" {
		return c.srv.Run(ctx)
	}
	ln, err := c.env.Listen(c.addr)
	if err != nil {
		return fmt.Errorf("http.api_addr: %w", err)
	}
	hs := c.env.NewServer(c.srv)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cached := make(chan error, 1)
	go func() { cached <- c.srv.Run(cctx) }()
	c.env.Logger.Info("snapshot API listening", "addr", ln.Addr().String())
	if err := process.Serve(ctx, hs, ln, c.timeout); err != nil {
		if ctx.Err() == nil {
			cancel()
			<-cached
			return fmt.Errorf("snapshot API: %w", err)
		}
		c.env.Logger.Warn("snapshot API", "error", err)
	}
	cancel()
	return <-cached
}
