package ingress

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/option"
)

// Option configures New. A nil Option is skipped.
type Option func(*option.Common) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return option.Logger[option.Common](l) }

// WithRegisterer registers ingress's metrics on r (default: none). The package doc lists
// them.
func WithRegisterer(r prometheus.Registerer) Option { return option.Registerer[option.Common](r) }

// WithTracerProvider traces ingress with tp (OpenTelemetry): a server span "ingress <topic>"
// per message, continuing the client's traceparent, parent of the Bus's publish span (default:
// the global provider as it is when New runs, which traces nothing until one is set). The
// client's trace context reaches the stored event with or without it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option.TracerProvider[option.Common](tp)
}
