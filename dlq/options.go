package dlq

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/option"
)

// Option configures Open beyond its Config: Go-only settings. A nil Option is skipped.
type Option func(*option.Common) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return option.Logger[option.Common](l) }

// WithRegisterer registers the Queue's metrics on r (default: none):
// dlq_dead_letters_total{topic,group,reason}, dlq_replayed_total{topic},
// dlq_discarded_total{topic}, dlq_parked_keys, dlq_advisories_refused_total,
// dlq_dropped_by_limit_total{stream} and dlq_replay_mismatches_total{topic,group}.
func WithRegisterer(r prometheus.Registerer) Option { return option.Registerer[option.Common](r) }

// WithTracerProvider traces the Queue with tp (OpenTelemetry): a span per dead letter written,
// in the failing delivery's trace, and per replay and replayed letter (see "Tracing" in
// trace.go and docs/operations.md). Default: the global provider as it is when Open runs,
// which traces nothing until one is set.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option.TracerProvider[option.Common](tp)
}
