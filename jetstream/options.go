package jetstream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

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
	resendAfter   time.Duration
	tracer        trace.TracerProvider
	baggageKeys   []string
}

func defaultOptions() options {
	return options{
		logger:        slog.New(slog.DiscardHandler),
		topicCacheTTL: 10 * time.Second,
		pinnedTTL:     10 * time.Second,
		asyncPending:  4000,
		resendAfter:   DefaultResendAfter,
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
// events_inflight{topic,group}, delivery_handler_duration_ms{topic,group},
// subscribe_poll_duration_ms{topic,group} and events_trace_headers_dropped_total{topic,header}.
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

// DefaultResendAfter is how long a publish waits for its acknowledgement before the Bus sends
// it again (WithResendAfter).
const DefaultResendAfter = time.Second

// asyncPublishTimeout is how long nats.go keeps an asynchronous publish waiting for its
// acknowledgement: one lost with a stream leader would otherwise hold a WithAsyncMaxPending
// slot, and keep PublishAsyncComplete open, for the life of the connection.
const asyncPublishTimeout = time.Minute

// WithResendAfter sets how long a publish waits for the server's acknowledgement before
// the Bus sends the same message again (default DefaultResendAfter), the wait doubling after
// each resend, until the publish's context ends. An acknowledgement can be lost when a
// stream's leader steps down (a NATS node restarting): the new leader is elected within a
// fraction of a second, and the resend is stored there, or recognized by its Nats-Msg-Id as
// already stored (the duplicate window), instead of the publish waiting out its whole
// timeout. A publish answered with an error is not sent again.
func WithResendAfter(d time.Duration) Option {
	return func(o *options) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: resend interval must be at least 10ms", jetbus.ErrInvalidOption)
		}
		o.resendAfter = d
		return nil
	}
}

// WithTracerProvider traces the Bus with tp (OpenTelemetry): a producer span per publish and
// a consumer span per delivery, each continuing the trace it belongs to (see "Tracing" in
// the package doc). Without it the Bus uses the global provider (otel.GetTracerProvider) as
// it is when Open runs: one set with otel.SetTracerProvider before Open traces, the default
// no-op does not. A provider that records nothing (a no-op) costs the Bus nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error { o.tracer = tp; return nil }
}

// WithBaggageKeys lets events carry the W3C baggage members of these keys: Publish takes
// them from ctx's baggage (or jetbus.WithBaggage) and writes the baggage header, a delivery
// exposes them in Event.Baggage (and, when the Bus traces, in the handler's ctx). Members of
// other keys are dropped: baggage crosses every consumer of a topic, so it is opt-in, key by
// key. Default: none, no baggage header is written or read. A key is an RFC 7230 token.
func WithBaggageKeys(keys ...string) Option {
	return func(o *options) error {
		for _, k := range keys {
			if err := jetbus.ValidateBaggageKey(k); err != nil {
				return err
			}
		}
		o.baggageKeys = append(o.baggageKeys, keys...)
		return nil
	}
}
