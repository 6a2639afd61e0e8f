package dlq

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures Open beyond its Config: Go-only settings. A nil Option is skipped.
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

// WithRegisterer registers the Queue's metrics on r (default: none):
// dlq_dead_letters_total{topic,group,reason}, dlq_replayed_total{topic},
// dlq_discarded_total{topic} and dlq_parked_keys.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) error { o.registerer = r; return nil }
}

func applyOptions(opts []Option) (options, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
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
