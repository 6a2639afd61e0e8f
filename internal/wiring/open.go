package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
	"github.com/jetbus/jetbus/schema"
)

// Needs says what a one-shot tool opens beside the NATS connection and the Bus.
type Needs struct {
	// Schemas opens the schema registry; SchemaBucket names its KV bucket (default
	// schema.DefaultBucket).
	Schemas      bool
	SchemaBucket string
	// Validated opens a second Bus whose publishes are validated against the registry
	// (implies Schemas): what a tool republishes goes through it.
	Validated bool
	// DLQ opens the DLQ queue, attached: a tool uses the DLQ as the processes configured it
	// and creates only what is missing (dlq.Config.Attach).
	DLQ bool
	// Mongo connects to MongoDB (mongo.uri).
	Mongo bool
}

// Tool is what a one-shot command (`bridge status`, `bridge dlq …`, `bridge schema push`,
// `projector rebuild`) works with. Fields are nil unless Needs asked for them. Close closes
// everything Open opened.
type Tool struct {
	Config *config.Config
	Logger *slog.Logger
	Conn   *nats.Conn
	Bus    *jetstream.Bus
	// Publisher publishes through the validating Bus when Needs.Validated, else the Bus.
	Publisher jetbus.Bus
	Schemas   *schema.Registry
	DLQ       *dlq.Queue
	Mongo     *mongo.Client
	// Tracer is the tool's tracer provider (the tracing section's, as the processes', its
	// service named after the binary): its Buses trace with it. Close flushes it last.
	Tracer trace.TracerProvider

	res resources
}

// Open connects a tool named name (as NATS's connz and MongoDB's app name show it) and opens
// what needs asks for. It fails at once when no NATS server answers. On error nothing stays
// open. log nil discards.
func Open(ctx context.Context, cfg *config.Config, name string, needs Needs, log *slog.Logger) (_ *Tool, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tool{Config: cfg, Logger: log}
	defer t.res.closeOnError(&err)
	binary, _, _ := strings.Cut(name, " ")
	tp, err := tracing.Start(ctx, tracingConfig(cfg, binary), log)
	if err != nil {
		return nil, err
	}
	t.res.add(func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return tp.Shutdown(sctx)
	})
	t.Tracer = tp.TracerProvider()
	busOpts := []jetstream.Option{jetstream.WithTracerProvider(t.Tracer), jetstream.WithBaggageKeys(cfg.Tracing.Baggage...), jetstream.WithLogger(log)}
	nc, err := process.ConnectNATS(cfg.NATS, "jetbus "+name, false)
	if err != nil {
		return nil, err
	}
	t.res.add(func() error { nc.Close(); return nil })
	t.Conn = nc
	if t.Bus, err = jetstream.Open(ctx, nc, busOpts...); err != nil {
		return nil, err
	}
	t.res.add(t.Bus.Close)
	t.Publisher = t.Bus
	if needs.Schemas || needs.Validated {
		bucket := needs.SchemaBucket
		if bucket == "" {
			bucket = schema.DefaultBucket
		}
		if t.Schemas, err = schema.Open(ctx, t.Bus.JetStream(), schema.WithBucket(bucket), schema.WithLogger(log)); err != nil {
			return nil, err
		}
		t.res.add(t.Schemas.Close)
	}
	if needs.Validated {
		vbus, err := jetstream.Open(ctx, nc, append(busOpts, jetstream.WithPublishMiddleware(t.Schemas.PublishMiddleware()))...)
		if err != nil {
			return nil, err
		}
		t.res.add(vbus.Close)
		t.Publisher = vbus
	}
	if needs.DLQ {
		if t.DLQ, err = dlq.Open(ctx, t.Bus.JetStream(), dlqConfig(cfg.DLQ, true), dlq.WithLogger(log)); err != nil {
			return nil, err
		}
		t.res.add(t.DLQ.Close)
	}
	if needs.Mongo {
		m, err := process.ConnectMongo(cfg.Mongo, "jetbus "+name)
		if err != nil {
			return nil, err
		}
		t.res.add(func() error { return m.Disconnect(context.WithoutCancel(ctx)) })
		t.Mongo = m
	}
	return t, nil
}

// Close closes everything Open opened, last opened first.
func (t *Tool) Close() error { return t.res.Close() }

// EnsureTopics creates or updates every declared topic, as the processes do at start.
func (t *Tool) EnsureTopics(ctx context.Context) error {
	return ensureTopics(ctx, t.Bus, t.Config.Topics, t.Logger)
}

// Status collects what /v1/ops/status shows, from NATS: the declared topics and the
// projections' groups.
func (t *Tool) Status(ctx context.Context) (*ops.Status, error) {
	topics, groups := statusSource(t.Config)
	return ops.Collect(ctx, ops.Source{JS: t.Bus.JetStream(), Bus: t.Bus, Topics: topics, Groups: groups})
}

// Rebuild rebuilds the declared projection name into its next generation (see
// projection.Rebuild); the tool needs Schemas, DLQ and Mongo. ErrUnknownProjection (with the
// declared names) when none is declared with that name.
func (t *Tool) Rebuild(ctx context.Context, name string, ro projection.RebuildOptions) (*projection.Live, error) {
	for _, p := range t.Config.Projections {
		if p.Name == name {
			return projection.Rebuild(ctx, t.Bus, t.Mongo, t.DLQ, projectionConfig(t.Config, p), ro, projectionOptions(t.Logger, nil, t.Schemas)...)
		}
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownProjection, name)
}
