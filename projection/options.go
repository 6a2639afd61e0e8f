package projection

import (
	"context"
	"fmt"
	"log/slog"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
	"github.com/jetbus/jetbus/partition"
)

// Bus is what a projection needs of the Bus: partitioned subscriptions (package partition
// consumes each partition through it), batch acknowledgement of ManualAck deliveries, keeping
// deliveries alive while a write is retried, the group's cursor for its lag, and the
// JetStream context for the partition leases. *jetstream.Bus has it.
type Bus interface {
	jetbus.Bus
	jetbus.PartitionSubscriber
	AckBatch(ctx context.Context, topic, group string, ids ...string) error
	InProgress(ctx context.Context, topic, group string, ids ...string) error
	JetStream() natsjs.JetStream
}

// DeadLetters is where a projection puts the events it cannot apply (reason "projection"),
// and the middleware that dead-letters undecodable deliveries and honours parking and replays
// before the projection sees them. *dlq.Queue has it.
type DeadLetters interface {
	DeadLetter(ctx context.Context, d *jetbus.Delivery, reason string, cause error) (uint64, error)
	Middleware() jetbus.HandlerMiddleware
}

// Option configures a projection beyond its Config: Go-only settings.
type Option func(*settings) error

type settings struct {
	log         *slog.Logger
	reg         prometheus.Registerer
	writeModels WriteModelsFunc
	mws         []jetbus.HandlerMiddleware
	tp          trace.TracerProvider
	tracer      trace.Tracer                              // spans.Tracer(tp): nil when the projection does not trace
	waitHook    func([]*partition.Subscriber, func() int) // tests: see engine.waitHook
}

func applyOptions(opts []Option) (settings, error) {
	var o settings
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.tracer = spans.Tracer(o.tp, scope)
	return o, nil
}

// WithTracerProvider traces the projection with tp (OpenTelemetry): a span per batch write,
// linked to each event's span (see "Tracing" in the package doc). Default: the global
// provider as it is when the projection is created, which traces nothing until one is set.
// The Bus traces the deliveries themselves (jetstream.WithTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *settings) error { o.tp = tp; return nil }
}

// WithLogger logs to l (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *settings) error { o.log = l; return nil }
}

// WithRegisterer registers the projection's metrics on r (see the package doc for the
// names). Several projections may share one registerer.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *settings) error { o.reg = r; return nil }
}

// WithMiddlewares wraps the projection's handling of each delivery, inside the dead-letter
// middleware: for example a schema registry's UpcastMiddleware, so that the projection sees
// every event in its latest shape. A middleware error is treated like the Bus treats a
// handler error (retried, then dead-lettered).
func WithMiddlewares(mws ...jetbus.HandlerMiddleware) Option {
	return func(o *settings) error {
		for _, m := range mws {
			if m == nil {
				return fmt.Errorf("%w: nil middleware", ErrInvalidConfig)
			}
		}
		o.mws = append(o.mws, mws...)
		return nil
	}
}
