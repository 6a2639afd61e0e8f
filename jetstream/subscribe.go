package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

// Subscribe implements jetbus.Bus. It creates or updates one durable consumer per (topic,
// partition) of the group before it returns, so a bad name, a missing topic or an
// unreachable server is reported here; then it consumes every partition in its own
// goroutine, one event at a time, in stream order.
func (b *Bus) Subscribe(ctx context.Context, topic, group string, h jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", jetbus.ErrInvalidOption)
	}
	if _, err := b.checkNames(ctx, topic, group); err != nil {
		return nil, err
	}
	o, err := jetbus.ApplySubscribeOptions(opts...)
	if err != nil {
		return nil, err
	}
	topics := []string{topic}
	for _, t := range o.FanIn {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	s := &subscription{
		bus:    b,
		group:  group,
		opts:   o,
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
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
			if o.Partitions != nil && !slices.Contains(o.Partitions, p) {
				continue
			}
			cons, err := b.ensureConsumer(ctx, t, group, p, &o, startSeq)
			if err != nil {
				return nil, err
			}
			s.parts = append(s.parts, &partConsumer{
				cons:      cons,
				sub:       s,
				topic:     t,
				stream:    jetbus.StreamName(t),
				partition: p,
				name:      jetbus.ConsumerName(group, p),
				gm:        b.metrics.group(t, group),
				log:       b.opts.logger.With("topic", t, "group", group, "partition", p),
			})
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
	parts   []*partConsumer

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

// partConsumer consumes one partition of one topic for a subscription.
type partConsumer struct {
	sub       *subscription
	topic     string
	stream    string
	partition int
	name      string
	gm        *groupMetrics
	log       *slog.Logger
	cons      natsjs.Consumer // from Subscribe, for the first pull; later pulls look it up again

	mu   sync.Mutex
	iter natsjs.MessagesContext

	// pinID is the pin the server gave this client, if it ever did, and lastDSeq the consumer
	// sequence of the last delivery received. Only the partition's own goroutine (run,
	// consume and the deferred release) touches them.
	pinID    string
	lastDSeq uint64
}

func (pc *partConsumer) stopIter() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.iter != nil {
		pc.iter.Drain()
	}
}

func (pc *partConsumer) setIter(it natsjs.MessagesContext) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.sub.stopping() {
		it.Stop()
		return false
	}
	pc.iter = it
	return true
}

func (pc *partConsumer) run() {
	defer pc.sub.wg.Done()
	defer pc.release()
	b := pc.sub.bus
	takeOver := pc.sub.opts.TakeOver
	retry := time.Duration(0)
	for !pc.sub.stopping() {
		if b.nc.IsClosed() {
			pc.sub.fail(fmt.Errorf("%w: the NATS connection is closed", jetbus.ErrClosed))
			return
		}
		if retry > 0 {
			select {
			case <-pc.sub.stopCh:
				return
			case <-time.After(retry):
			}
		}
		retry = min(max(2*retry, 50*time.Millisecond), 2*time.Second)
		cons, err := pc.cons, error(nil)
		pc.cons = nil
		if cons == nil {
			cons, err = b.js.Consumer(pc.sub.ctx, pc.stream, pc.name)
		}
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			// Deleted behind our back: recreate it where the subscription starts.
			pc.cons, err = b.ensureConsumer(pc.sub.ctx, pc.topic, pc.sub.group, pc.partition, &pc.sub.opts, func() (uint64, error) {
				return b.resolve(pc.sub.ctx, pc.topic, pc.sub.opts.From)
			})
			if err == nil {
				retry = 0
				continue
			}
		}
		if err != nil {
			pc.log.Warn("consumer lookup failed", "err", err)
			continue
		}
		if takeOver {
			if err := pc.takeOver(); err != nil {
				pc.log.Warn("take over failed", "err", err)
				continue
			}
			takeOver = false
		}
		it, err := cons.Messages(
			natsjs.PullMaxMessages(min(pc.sub.opts.BatchSize, pc.sub.opts.MaxInFlight)),
			natsjs.PullPriorityGroup(jetbus.PriorityGroup),
		)
		if err != nil {
			pc.log.Warn("pull failed", "err", err)
			continue
		}
		if !pc.setIter(it) {
			return
		}
		err = pc.consume(it)
		if errors.Is(err, natsjs.ErrMsgIteratorClosed) && pc.sub.stopping() {
			return
		}
		it.Stop()
		if err != nil && !errors.Is(err, natsjs.ErrMsgIteratorClosed) {
			pc.log.Info("pull interrupted, resuming", "err", err)
		}
		if errors.Is(err, errDeliveryGap) {
			retry = 0
		}
		// Deliveries sent to the pull that just ended may have been lost on the way (a
		// reconnect, a consumer leader change): get them back now and in order rather than
		// after the ack timeout and behind later events of their keys.
		pc.recoverDeliveries()
		if err == nil || errors.Is(err, natsjs.ErrMsgIteratorClosed) {
			retry = 0
		}
	}
}

// errDeliveryGap ends a pull whose consumer sequence skipped: deliveries were lost in flight.
var errDeliveryGap = errors.New("jetbus: deliveries lost in flight")

// recoverDeliveries returns the partition's unacknowledged deliveries to the consumer, in
// order, when this client holds the partition. It waits briefly for this client's own acks
// to be settled first, so that few handled events are delivered again.
func (pc *partConsumer) recoverDeliveries() {
	pc.lastDSeq = 0
	if pc.pinID == "" {
		return
	}
	b := pc.sub.bus
	ctx, cancel := context.WithTimeout(pc.sub.ctx, 5*time.Second)
	defer cancel()
	info, err := pc.settledInfo(ctx, 500*time.Millisecond)
	if err != nil || info.NumAckPending == 0 || !pinnedBy(info, pc.pinID) {
		return
	}
	if err := b.resetConsumer(ctx, pc.stream, pc.name, 0); err != nil {
		pc.log.Warn("returning lost deliveries failed; they come back after the ack timeout", "err", err)
	}
}

// settledInfo flushes this client's acks and returns the consumer's state once nothing is
// pending or wait has passed.
func (pc *partConsumer) settledInfo(ctx context.Context, wait time.Duration) (*natsjs.ConsumerInfo, error) {
	b := pc.sub.bus
	if err := b.nc.FlushWithContext(ctx); err != nil {
		pc.log.Debug("flush failed", "err", err)
	}
	deadline := time.Now().Add(wait)
	for {
		cons, err := b.js.Consumer(ctx, pc.stream, pc.name)
		if err != nil {
			return nil, err
		}
		info := cons.CachedInfo()
		if info.NumAckPending == 0 || time.Now().After(deadline) {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return info, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func pinnedBy(info *natsjs.ConsumerInfo, pin string) bool {
	for _, g := range info.PriorityGroups {
		if g.Group == jetbus.PriorityGroup {
			return g.PinnedClientID == pin
		}
	}
	return false
}

// consume handles messages until the iterator ends.
func (pc *partConsumer) consume(it natsjs.MessagesContext) error {
	handle := pc.handle
	if n := pc.sub.opts.KeyConcurrency; n > 1 {
		ws := pc.startWorkers(n)
		defer ws.stop()
		handle = ws.dispatch
	}
	for {
		t0 := time.Now()
		msg, err := it.Next()
		if err != nil {
			return err
		}
		if pc.gm != nil {
			pc.gm.poll(time.Since(t0))
		}
		if pin := msg.Headers().Get("Nats-Pin-Id"); pin != "" && pin != pc.pinID {
			pc.pinID = pin
		}
		meta, err := msg.Metadata()
		if err != nil {
			pc.log.Error("message without metadata, terminated", "err", err)
			_ = msg.TermWithReason("jetbus: no metadata")
			continue
		}
		if dseq := meta.Sequence.Consumer; pc.lastDSeq != 0 && dseq > pc.lastDSeq+1 {
			// Deliveries between the two were lost on the way to this client: this one must
			// wait for them (the recovery delivers it again, after them).
			return fmt.Errorf("%w: consumer sequence %d after %d", errDeliveryGap, dseq, pc.lastDSeq)
		}
		pc.lastDSeq = meta.Sequence.Consumer
		if pc.sub.stopping() && !pc.sub.draining.Load() {
			// Fetched but not started: give it back so the next owner gets it at once.
			if err := msg.Nak(); err != nil {
				pc.log.Debug("nak on stop failed", "err", err)
			}
			continue
		}
		handle(msg, meta)
	}
}

type delivered struct {
	msg  natsjs.Msg
	meta *natsjs.MsgMetadata
}

// keyWorkers spread a partition's messages over workers by key (KeyConcurrency).
type keyWorkers struct {
	pc   *partConsumer
	in   []chan delivered
	wg   sync.WaitGroup
	next int // round robin for keyless events
}

func (pc *partConsumer) startWorkers(n int) *keyWorkers {
	ws := &keyWorkers{pc: pc, in: make([]chan delivered, n)}
	for i := range ws.in {
		ws.in[i] = make(chan delivered, pc.sub.opts.BatchSize/n+1)
		ws.wg.Add(1)
		go func(in <-chan delivered) {
			defer ws.wg.Done()
			for d := range in {
				if pc.sub.stopping() && !pc.sub.draining.Load() {
					_ = d.msg.Nak()
					continue
				}
				pc.handle(d.msg, d.meta)
			}
		}(ws.in[i])
	}
	return ws
}

func (ws *keyWorkers) dispatch(msg natsjs.Msg, meta *natsjs.MsgMetadata) {
	var i int
	if key := msg.Headers().Get(jetbus.HeaderKey); key != "" {
		i = int(jetbus.KeyHash(key) % uint64(len(ws.in)))
	} else {
		i = ws.next
		ws.next = (ws.next + 1) % len(ws.in)
	}
	ws.in[i] <- delivered{msg, meta}
}

// stop lets the workers finish what they were given and waits for them.
func (ws *keyWorkers) stop() {
	for _, in := range ws.in {
		close(in)
	}
	ws.wg.Wait()
}

// handle runs the handler chain on one message and settles it.
func (pc *partConsumer) handle(msg natsjs.Msg, meta *natsjs.MsgMetadata) {
	s := pc.sub
	both := new(struct {
		d jetbus.Delivery
		e jetbus.Event
	})
	e := &both.e
	raw, decodeErr := decode(e, msg, meta)
	if decodeErr == nil && s.opts.Filter != nil && !s.opts.Filter(e) {
		_ = msg.Ack()
		return
	}
	d := &both.d
	*d = jetbus.Delivery{
		Event:       e,
		Group:       s.group,
		Attempt:     int(meta.NumDelivered),
		MaxAttempts: s.opts.MaxAttempts,
		Msg:         raw,
		DecodeErr:   decodeErr,
	}
	var key pendingKey
	if s.opts.ManualAck {
		key = pendingKey{topic: pc.topic, group: s.group, id: e.ID}
		s.bus.addPending(key, &pendingDelivery{msg: msg, sub: s, pc: pc, attempt: d.Attempt})
	}
	var t0 time.Time
	if pc.gm != nil {
		pc.gm.deliver()
		t0 = time.Now()
	}
	err := pc.call(d)
	for err != nil && s.opts.KeyConcurrency > 1 && !jetbus.IsPermanent(err) && d.Attempt < s.opts.MaxAttempts {
		// Retry in place so the key's next event waits for this one.
		if !pc.holdFor(msg, s.opts.Backoff(d.Attempt)) {
			break // stopping: the server gets it back
		}
		d.Attempt++
		err = pc.call(d)
	}
	if pc.gm != nil {
		pc.gm.handled(time.Since(t0))
	}
	if s.opts.ManualAck {
		if err == nil {
			return // settled by Bus.Ack or Bus.Nack
		}
		if !s.bus.takePending(key, msg) {
			return // already settled by the handler itself
		}
	}
	pc.settle(msg, d.Attempt, e, err)
}

// holdFor waits d while keeping msg's ack deadline alive. It returns false when the
// subscription stops (without draining) meanwhile.
func (pc *partConsumer) holdFor(msg natsjs.Msg, d time.Duration) bool {
	tick := max(pc.sub.opts.AckTimeout/3, time.Millisecond)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		t := time.NewTimer(min(left, tick))
		select {
		case <-pc.sub.stopCh:
			t.Stop()
			if !pc.sub.draining.Load() {
				return false
			}
			<-t.C
		case <-t.C:
		}
		_ = msg.InProgress()
	}
}

// call runs the handler chain, turning a panic into an error.
func (pc *partConsumer) call(d *jetbus.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jetbus: handler panic: %v", r)
		}
	}()
	return pc.sub.handler(pc.sub.ctx, d)
}

// settle acknowledges, retries or terminates a message after its handler returned err.
func (pc *partConsumer) settle(msg natsjs.Msg, attempt int, e *jetbus.Event, err error) {
	s := pc.sub
	var serr error
	switch {
	case err == nil:
		serr = msg.Ack()
		pc.gm.settle(true)
		return
	case jetbus.IsPermanent(err):
		pc.log.Warn("event failed permanently, terminated", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		serr = msg.TermWithReason(truncate(err.Error(), 256))
	case attempt < s.opts.MaxAttempts:
		pc.log.Info("event failed, will retry", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		serr = msg.NakWithDelay(s.opts.Backoff(attempt))
	default:
		pc.log.Error("event failed on its last attempt", "id", e.ID, "seq", e.Seq, "attempt", attempt, "err", err)
		serr = msg.Nak()
	}
	pc.gm.settle(false)
	if serr != nil {
		pc.log.Warn("settle failed; the server will redeliver after the ack timeout", "id", e.ID, "err", serr)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// release hands the partition back when the subscription stops: deliveries still
// unacknowledged at the server (a retry waiting for its backoff, or messages the server sent to
// the pull request as it was closing) are returned by resetting the consumer to its ack floor,
// so the next owner gets them first and in order; then the pin is released, so the next
// subscriber does not wait for the pin TTL.
func (pc *partConsumer) release() {
	pin := pc.pinID
	if pin == "" {
		return // never consumed: nothing to hand back, and the pin is someone else's
	}
	b := pc.sub.bus
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := pc.settledInfo(ctx, time.Second)
	if err != nil {
		pc.log.Debug("consumer lookup on release failed", "err", err)
		return
	}
	if !pinnedBy(info, pin) {
		return // someone else holds the partition now: its state is not ours to touch
	}
	if info.NumAckPending > 0 {
		if err := b.resetConsumer(ctx, pc.stream, pc.name, 0); err != nil {
			pc.log.Warn("returning unacknowledged deliveries failed; they come back after the ack timeout", "err", err)
		}
	}
	if err := b.unpin(ctx, pc.stream, pc.name); err != nil {
		pc.log.Debug("unpin failed", "err", err)
	}
}

// takeOver takes the partition from a previous holder that is known to have stopped (see
// jetbus.TakeOver): it unpins it and returns its unacknowledged deliveries to the consumer so
// they are delivered first, in order, instead of after the ack timeout.
func (pc *partConsumer) takeOver() error {
	b := pc.sub.bus
	ctx, cancel := context.WithTimeout(pc.sub.ctx, 10*time.Second)
	defer cancel()
	if err := b.unpin(ctx, pc.stream, pc.name); err != nil {
		return err
	}
	cons, err := b.js.Consumer(ctx, pc.stream, pc.name)
	if err != nil {
		return err
	}
	if cons.CachedInfo().NumAckPending > 0 {
		return b.resetConsumer(ctx, pc.stream, pc.name, 0)
	}
	return nil
}

func (b *Bus) unpin(ctx context.Context, stream, consumer string) error {
	return withRetry(ctx, func(ctx context.Context) error {
		s, err := b.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.UnpinConsumer(ctx, consumer, jetbus.PriorityGroup)
	})
}
