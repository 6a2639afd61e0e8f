package jetstream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus"
)

// Option configures Open.
type Option func(*options) error

type options struct {
	logger        *slog.Logger
	registerer    prometheus.Registerer
	publishMW     []jetbus.PublishMiddleware
	handlerMW     []jetbus.HandlerMiddleware
	topicCacheTTL time.Duration
	pinnedTTL     time.Duration
	asyncPending  int
}

func defaultOptions() options {
	return options{
		logger:        slog.New(slog.DiscardHandler),
		topicCacheTTL: 10 * time.Second,
		pinnedTTL:     10 * time.Second,
		asyncPending:  4000,
	}
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

// WithRegisterer registers the Bus's metrics on r (default: no metrics). Metric names follow
// docs/operations.md, "Metrics": events_published_total{topic}, events_delivered_total{topic,group},
// events_acked_total{topic,group}, events_nacked_total{topic,group},
// events_inflight{topic,group}, delivery_handler_duration_ms{topic,group} and
// subscribe_poll_duration_ms{topic,group}.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) error { o.registerer = r; return nil }
}

// WithPublishMiddleware wraps every publish (the first is the outermost).
func WithPublishMiddleware(mws ...jetbus.PublishMiddleware) Option {
	return func(o *options) error { o.publishMW = append(o.publishMW, mws...); return nil }
}

// WithHandlerMiddleware wraps every subscription's handler (the first is the outermost),
// outside the subscription's own jetbus.Use middlewares.
func WithHandlerMiddleware(mws ...jetbus.HandlerMiddleware) Option {
	return func(o *options) error { o.handlerMW = append(o.handlerMW, mws...); return nil }
}

// WithTopicCacheTTL sets how long a topic's partition count is cached (default 10s).
func WithTopicCacheTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: negative topic cache TTL", jetbus.ErrInvalidOption)
		}
		o.topicCacheTTL = d
		return nil
	}
}

// WithPinnedTTL sets how long a silent client keeps a partition's consumer pinned before
// another subscriber may take it (default 10s).
func WithPinnedTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: pinned TTL must be at least 100ms", jetbus.ErrInvalidOption)
		}
		o.pinnedTTL = d
		return nil
	}
}

// WithAsyncMaxPending bounds outstanding PublishAsync acknowledgements (default 4000);
// PublishAsync blocks while the bound is reached.
func WithAsyncMaxPending(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("%w: async max pending must be positive", jetbus.ErrInvalidOption)
		}
		o.asyncPending = n
		return nil
	}
}
