package dlq

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

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
