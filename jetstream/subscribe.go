package jetstream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jetbus/jetbus"
)

// Subscribe implements jetbus.Bus. It creates or updates one durable consumer per (topic,
// partition) of the group before it returns, so a bad name, a missing topic, an
// unreachable server or a subscription whose order differs from its group's
// (jetbus.Unordered) is reported here; then it consumes every partition in its own
// goroutine, one event at a time, in stream order (unordered: in the order the server
// hands this subscriber its share).
func (b *Bus) Subscribe(ctx context.Context, topic, group string, h jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error) {
	return b.subscribe(ctx, topic, group, -1, h, opts)
}

// SubscribePartition implements jetbus.PartitionSubscriber: Subscribe limited to partition p,
// taking it over from its previous holder.
func (b *Bus) SubscribePartition(ctx context.Context, topic, group string, p int, h jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error) {
	if p < 0 {
		return nil, fmt.Errorf("%w: negative partition %d", jetbus.ErrInvalidOption, p)
	}
	return b.subscribe(ctx, topic, group, p, h, opts)
}

// subscribe consumes every partition of topic and its FanIn topics (only < 0), or only
// partition `only` of topic, taking it over.
func (b *Bus) subscribe(ctx context.Context, topic, group string, only int, h jetbus.Handler, opts []jetbus.SubscribeOption) (jetbus.Subscription, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", jetbus.ErrInvalidOption)
	}
	n, err := b.checkNames(ctx, topic, group)
	if err != nil {
		return nil, err
	}
	o, err := jetbus.ApplySubscribeOptions(opts...)
	if err != nil {
		return nil, err
	}
	if only >= 0 {
		if o.Unordered {
			return nil, fmt.Errorf("%w: SubscribePartition takes a partition over from its one client, and an unordered group has none (jetbus.Unordered): subscribe it with Subscribe", jetbus.ErrInvalidOption)
		}
		if len(o.FanIn) > 0 {
			return nil, fmt.Errorf("%w: FanIn with a single partition", jetbus.ErrInvalidOption)
		}
		if only >= n {
			return nil, fmt.Errorf("%w: partition %d of %s, which has %d", jetbus.ErrInvalidOption, only, topic, n)
		}
	}
	topics := []string{topic}
	for _, t := range o.FanIn {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	s := &subscription{
		bus:      b,
		group:    group,
		opts:     o,
		takeOver: only >= 0,
		stopCh:   make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	inner := func(ctx context.Context, d *jetbus.Delivery) error {
		if d.DecodeErr != nil {
			return jetbus.Permanent(d.DecodeErr)
		}
		return h(ctx, d)
	}
	s.handler = jetbus.ChainHandler(inner, append(slices.Clone(b.opts.handlerMW), o.Middlewares...)...)

	for _, t := range topics {
		n, err := b.topics.partitions(ctx, t)
		if err != nil {
			return nil, err
		}
		var start struct {
			once sync.Once
			seq  uint64
			err  error
		}
		startSeq := func() (uint64, error) {
			start.once.Do(func() { start.seq, start.err = b.resolve(ctx, t, o.From) })
			return start.seq, start.err
		}
		for p := range n {
			if only >= 0 && p != only {
				continue
			}
			cons, err := b.ensureConsumer(ctx, t, group, p, &o, startSeq)
			if err != nil {
				return nil, err
			}
			pc := &partConsumer{
				cons:      cons,
				sub:       s,
				topic:     t,
				stream:    jetbus.StreamName(t),
				partition: p,
				name:      jetbus.ConsumerName(group, p),
				gm:        b.metrics.group(t, group),
				log:       b.opts.logger.With("topic", t, "group", group, "partition", p),
				win:       newWindow(o.BatchSize, o.MaxInFlight, o.KeyConcurrency, o.AckTimeout),
			}
			if b.tracer != nil {
				pc.span = newProcessSpan(t, group, p)
			}
			s.parts = append(s.parts, pc)
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, jetbus.ErrClosed
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()

	for _, pc := range s.parts {
		s.wg.Add(1)
		go pc.run()
	}
	stopOnCancel := context.AfterFunc(ctx, func() { s.stop(false) })
	go func() {
		s.wg.Wait()
		stopOnCancel()
		s.cancel()
		b.dropPending(s)
		b.mu.Lock()
		delete(b.subs, s)
		b.mu.Unlock()
		close(s.done)
	}()
	return s, nil
}

// subscription is a running Subscribe.
type subscription struct {
	bus     *Bus
	group   string
	opts    jetbus.SubscribeOptions
	handler jetbus.Handler
	// takeOver: each partition is taken from its previous holder (SubscribePartition).
	takeOver bool
	parts    []*partConsumer

	ctx    context.Context // handlers' context: cancelled once every partition stopped
	cancel context.CancelFunc

	stopOnce sync.Once
	stopCh   chan struct{}
	draining atomic.Bool
	wg       sync.WaitGroup
	done     chan struct{}
	err      atomic.Pointer[error] // why it stopped by itself
}

// fail stops the subscription because of err (reported by Err).
func (s *subscription) fail(err error) {
	s.err.CompareAndSwap(nil, &err)
	s.stop(false) // does not wait: safe from a partition's own goroutine
}

var _ jetbus.Subscription = (*subscription)(nil)

func (s *subscription) stop(drain bool) {
	s.stopOnce.Do(func() {
		s.draining.Store(drain)
		close(s.stopCh)
		for _, pc := range s.parts {
			pc.stopIter()
		}
	})
}

func (s *subscription) stopping() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// Stop implements jetbus.Subscription.
func (s *subscription) Stop() error {
	s.stop(false)
	<-s.done
	return nil
}

// Drain implements jetbus.Subscription.
func (s *subscription) Drain(ctx context.Context) error {
	s.stop(true)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.draining.Store(false)
		<-s.done
		return ctx.Err()
	}
}

// Done implements jetbus.Subscription.
func (s *subscription) Done() <-chan struct{} { return s.done }

// Err implements jetbus.Subscription. Partition consumers retry failures until stopped; a
// subscription ends by itself only when the NATS connection is closed (jetbus.ErrClosed).
func (s *subscription) Err() error {
	if e := s.err.Load(); e != nil {
		return *e
	}
	return nil
}
