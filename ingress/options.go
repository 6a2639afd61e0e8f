package ingress

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/option"
)

// Option configures New. A nil Option is skipped.
type Option func(*option.Common) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return option.Logger[option.Common](l) }

// WithRegisterer registers ingress's metrics on r (default: none). The package doc lists
// them.
func WithRegisterer(r prometheus.Registerer) Option { return option.Registerer[option.Common](r) }
