// Package option holds what the components' functional options share: the Go-only settings
// every component takes (a logger, a Prometheus registerer and an OpenTelemetry tracer
// provider) and the loop that applies options. A component keeps its own Option type and With… functions, and builds
// them from these so that each says in one line what it sets.
package option

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Common is the settings every component takes as options. A component's options struct
// embeds it.
type Common struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// TracerProvider traces the component (nil: OpenTelemetry's global provider, which
	// traces nothing until one is set; internal/spans.Tracer tells).
	TracerProvider trace.TracerProvider
}

// common returns c: it lets Logger and Registerer reach the Common of any struct embedding it.
func (c *Common) common() *Common { return c }

// Embedder is a pointer to a component's options struct T that embeds Common.
type Embedder[T any] interface {
	*T
	common() *Common
}

// Logger sets the logger; a nil l keeps the default.
func Logger[T any, P Embedder[T]](l *slog.Logger) func(*T) error {
	return func(o *T) error {
		if l != nil {
			P(o).common().Logger = l
		}
		return nil
	}
}

// Registerer sets the Prometheus registerer (nil: no metrics registered).
func Registerer[T any, P Embedder[T]](r prometheus.Registerer) func(*T) error {
	return func(o *T) error { P(o).common().Registerer = r; return nil }
}

// TracerProvider sets the tracer provider (nil: the global one).
func TracerProvider[T any, P Embedder[T]](tp trace.TracerProvider) func(*T) error {
	return func(o *T) error { P(o).common().TracerProvider = tp; return nil }
}

// Apply returns the options opts set, in order, from their defaults: a Common whose logger
// discards. Nil options are skipped; the first error is returned.
func Apply[T any, P Embedder[T], O ~func(*T) error](opts []O) (T, error) {
	var o T
	P(&o).common().Logger = slog.New(slog.DiscardHandler)
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}
