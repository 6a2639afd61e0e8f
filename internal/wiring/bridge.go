package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// Bridge returns the bridge process for cfg: at start it pushes the schemas, ensures the
// declared topics and opens the DLQ; it runs the DLQ sweeper, one component per changefeed
// and outbox drainer, and ingress when topics are open to it.
//
// Shared, each opened once: the NATS connection and the plain Bus (process.Run's), one
// schema registry, one DLQ queue. Publishing components get Buses of their own on that
// connection, one per kind: ingress publishes what any NATS client sends, so its Bus's bound
// on pending async publishes (ingress.max_in_flight) must not be one that a flood of client
// messages could fill while changefeeds and outbox drainers wait for room in it; those share
// a second Bus sized for all their windows together. Ingress also gets a NATS connection of
// its own (see ingress.New: a slow consumer there must not stall the process's connection).
func Bridge(cfg *config.Config) (process.Spec, error) {
	topics, listed := statusSource(cfg)
	guard, err := opsGuard(cfg)
	if err != nil {
		return process.Spec{}, err
	}
	return process.Spec{
		Name:        "bridge",
		NeedsMongo:  len(cfg.Changefeeds) > 0 || len(cfg.Outbox) > 0,
		Topics:      topics,
		Listed:      listed,
		OpsGuard:    guard,
		Tracing:     tracingConfig(cfg, "bridge"),
		BaggageKeys: cfg.Tracing.Baggage,
		Setup: func(ctx context.Context, env *process.Env) (comps []process.Component, err error) {
			res := &resources{}
			defer res.closeOnError(&err) // Setup runs again after an error: leave nothing open behind
			sh, err := openShared(ctx, env, res, ownDLQ)
			if err != nil {
				return nil, err
			}
			if cfg.Schemas != "" {
				if err := pushSchemas(ctx, sh.reg, cfg.Schemas, env); err != nil {
					return nil, err
				}
			}
			if err := ensureTopics(ctx, env.Bus, cfg.Topics, env.Logger); err != nil {
				return nil, err
			}
			comps = []process.Component{sweeper(sh.q, cfg.DLQ.SweepInterval)}
			feeds, err := changefeeds(ctx, sh)
			if err != nil {
				return nil, err
			}
			ing, err := ingressComponent(ctx, sh)
			if err != nil {
				return nil, err
			}
			env.OnClose(res.closeWith)
			return append(append(comps, feeds...), ing...), nil
		},
	}, nil
}

// pushSchemas registers the schema files of dir, idempotently.
func pushSchemas(ctx context.Context, reg *schema.Registry, dir string, env *process.Env) error {
	pushed, err := schema.PushDir(ctx, reg, dir)
	for _, p := range pushed {
		env.Logger.Info("schema", "topic", p.Topic, "version", p.Version, "registered", p.Created)
	}
	return err
}

// ensureTopics creates or updates every declared topic.
func ensureTopics(ctx context.Context, bus *jetstream.Bus, topics []config.Topic, log *slog.Logger) error {
	for _, t := range topics {
		tc := topicConfig(t)
		if err := bus.EnsureTopic(ctx, tc); err != nil {
			return err
		}
		log.Info("topic ensured", "topic", t.Name, "partitions", tc.Partitions, "replicas", tc.Replicas)
	}
	return nil
}

// sweeper is the DLQ safety net as a component: it moves deliveries the server gave up on
// into the DLQ every interval.
func sweeper(q *dlq.Queue, every time.Duration) process.Component {
	return process.Func("dlq/sweeper", func(ctx context.Context) error { return q.RunSweeper(ctx, every) })
}

// changefeeds returns one component per declared changefeed and outbox drainer, publishing
// through one validating Bus; what can never be published goes to the DLQ.
func changefeeds(ctx context.Context, sh *shared) ([]process.Component, error) {
	cfg, env := sh.env.Config, sh.env
	if len(cfg.Changefeeds) == 0 && len(cfg.Outbox) == 0 {
		return nil, nil
	}
	// The runners share the Bus: its bound on outstanding async publishes must hold all their
	// windows, or a full Bus would fail publishes that each runner's window allows.
	pending := len(cfg.Outbox) * changefeed.DefaultMaxInFlight
	for _, fc := range cfg.Changefeeds {
		pending += max(fc.MaxInFlight, 1)
	}
	bus, err := sh.publishingBus(ctx, pending)
	if err != nil {
		return nil, err
	}
	opts := []changefeed.Option{changefeed.WithLogger(env.Logger), changefeed.WithRegisterer(env.Metrics), changefeed.WithDeadLetters(sh.q)}
	var comps []process.Component
	for _, fc := range cfg.Changefeeds {
		f, err := changefeed.New(ctx, bus, env.Mongo, changefeedConfig(cfg, fc), opts...)
		if err != nil {
			return nil, fmt.Errorf("changefeed %s: %w", fc.Name, err)
		}
		comps = append(comps, f)
	}
	for _, oc := range cfg.Outbox {
		d, err := changefeed.NewDrainer(ctx, bus, env.Mongo, outboxConfig(cfg, oc), opts...)
		if err != nil {
			return nil, fmt.Errorf("outbox %s: %w", oc.Name, err)
		}
		comps = append(comps, d)
	}
	return comps, nil
}

// ingressComponent returns ingress when the configuration opens topics to it.
func ingressComponent(ctx context.Context, sh *shared) ([]process.Component, error) {
	cfg, env := sh.env.Config, sh.env
	if len(cfg.Ingress.Allow) == 0 {
		return nil, nil
	}
	bus, err := sh.publishingBus(ctx, cfg.Ingress.MaxInFlight)
	if err != nil {
		return nil, err
	}
	conn, err := process.ConnectNATS(cfg.NATS, "jetbus bridge ingress", true)
	if err != nil {
		return nil, err
	}
	sh.res.add(func() error { conn.Close(); return nil })
	conn.SetErrorHandler(natsErrors(env.Logger))
	g, err := ingress.New(conn, bus, sh.q, ingressConfig(cfg), ingress.WithLogger(env.Logger), ingress.WithRegisterer(env.Metrics))
	if err != nil {
		return nil, err
	}
	return []process.Component{g}, nil
}
