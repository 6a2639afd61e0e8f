package ingress

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures New. A nil Option is skipped.
type Option func(*options) error

type options struct {
	logger     *slog.Logger
	registerer prometheus.Registerer
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l != nil {
			o.logger = l
		}
		return nil
	}
}

// WithRegisterer registers ingress's metrics on r (default: none). The package doc lists
// them.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) error { o.registerer = r; return nil }
}
