package jetstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/spans"
)

// Bus is the jetbus Bus on JetStream. Create it with Open; it is safe for concurrent use.
type Bus struct {
	nc      *nats.Conn
	js      natsjs.JetStream
	opts    options
	metrics *metrics

	// tracer is nil when the Bus does not trace (spans.Tracer); keepBaggage is nil when no
	// baggage key is allowed (WithBaggageKeys).
	tracer      trace.Tracer
	keepBaggage func(string) bool
	pubSpans    sync.Map // topic → *publishSpan

	publishSync  jetbus.PublishFunc
	publishAsync jetbus.PublishFunc

	topics topicCache

	closedFlag atomic.Bool // read on every publish; closed (under mu) is the authority

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	// pending holds the deliveries of ManualAck subscriptions awaiting Ack or Nack, per event
	// ID oldest first (ack.go).
	pending map[pendingKey][]*pendingDelivery
}

var (
	_ jetbus.Bus                 = (*Bus)(nil)
	_ jetbus.PartitionSubscriber = (*Bus)(nil)
	_ jetbus.AsyncPublisher      = (*Bus)(nil)
	_ jetbus.PublishFuture       = (*publishFuture)(nil)
)

// Open returns a Bus on the JetStream of nc. Options:
//
//   - WithLogger: logger (default discard).
//   - WithRegisterer: Prometheus registerer for the Bus's metrics (default none).
//   - WithPublishMiddleware, WithHandlerMiddleware: middlewares for every publish and handler.
//   - WithTopicCacheTTL: how long partition counts are cached (default 10s).
//   - WithPinnedTTL: how long a silent client keeps a partition pinned (default 10s).
//   - WithAsyncMaxPending: bound on outstanding async publishes (default 4000).
//   - WithTracerProvider: OpenTelemetry tracing (default: the global provider, a no-op
//     unless one was set).
//   - WithBaggageKeys: the W3C baggage keys events may carry (default none).
//
// Open waits for JetStream through a leader election or a node restart, asking again until
// ctx ends; ctx bounds the wait, and its end is said in the error.
//
// The Bus does not own nc: Close stops the Bus's subscriptions but leaves nc open.
func Open(ctx context.Context, nc *nats.Conn, opts ...Option) (*Bus, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", jetbus.ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(o.asyncPending), natsjs.WithPublishAsyncTimeout(asyncPublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetbus: jetstream: %w", retry.Opaque(err))
	}
	// Through a JetStream leader election or a node restart the request goes unanswered or
	// is refused as unavailable for a while: ask again until ctx ends.
	if err := retry.Do(ctx, apiPolicy, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		warnRetry(o.logger, "jetstream not available", err)
		return err
	}); err != nil {
		return nil, fmt.Errorf("jetbus: jetstream not available%s: %w", untilEnd(ctx), retry.Opaque(err))
	}
	m, err := newMetrics(o.registerer)
	if err != nil {
		return nil, err
	}
	b := &Bus{
		nc:      nc,
		js:      js,
		opts:    o,
		metrics: m,
		subs:    make(map[*subscription]struct{}),
		pending: make(map[pendingKey][]*pendingDelivery),

		tracer:      spans.Tracer(o.tracer, scope),
		keepBaggage: baggageFilter(o.baggageKeys),
	}
	b.topics.init(js, o.topicCacheTTL)
	b.publishSync = jetbus.ChainPublish(b.writeSync, o.publishMW...)
	b.publishAsync = jetbus.ChainPublish(b.writeAsync, o.publishMW...)
	return b, nil
}

// JetStream returns the JetStream context the Bus uses, e.g. for KV buckets.
func (b *Bus) JetStream() natsjs.JetStream { return b.js }

// Conn returns the NATS connection the Bus uses.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Close stops every subscription of the Bus (as Subscription.Stop) and refuses further calls.
// It does not close the NATS connection.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.closedFlag.Store(true)
	subs := make([]*subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Stop()
	}
	return nil
}

func (b *Bus) isClosed() bool { return b.closedFlag.Load() }
