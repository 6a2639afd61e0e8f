package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/partition"
)

// outcome is what became of an event in its batch.
type outcome uint8

const (
	outPending    outcome = iota
	outWritten            // its effect was part of a write that succeeded
	outCoalesced          // superseded by a later event of its key in the batch
	outStale              // not newer than an earlier event of its key in the batch
	outSkipped            // at or below the checkpoint, or settled by a middleware
	outDeadLetter         // to be dead-lettered with err
)

// strategy is how a projection writes what its engine consumes: a changelog view (*view)
// or a transactional handler (*Transactional). The engine does the consuming, batching,
// dead-lettering and acknowledging, and calls its strategy only through these methods.
//
// Concurrency: the engine calls them concurrently for different partitions. For one
// partition it calls open once, before the partition takes a delivery; then decode for each
// delivery as the Bus hands it over (decode may run while apply writes an earlier batch, so
// it touches en alone); apply from the partition's flusher, one batch at a time in stream
// order, and again with the same batch after it failed; close once, after the flusher
// stopped and no other call for the partition runs, also when open failed.
type strategy interface {
	// open prepares partition ps, which this replica starts to own, keeping what the
	// strategy needs of it in ps.state. An error abandons the partition (it is taken again).
	open(ctx context.Context, ps *partState) error
	// decode makes what apply needs of en's delivery (en.ev), or marks en dead-lettered
	// (entry.deadLetter) or settled (noop), in the Bus's handler.
	decode(en *entry)
	// apply writes batch b of partition ps. It sets the outcome of each entry it handles; an
	// error makes the engine retry the batch after a backoff (nothing is acknowledged).
	apply(ctx context.Context, ps *partState, b *batch) error
	// close releases what open took for ps.
	close(ps *partState)
}

// entry is one delivery held by a partition until its batch is written and acknowledged.
type entry struct {
	d      *jetbus.Delivery
	ev     any   // the strategy's decoding of d (decode sets it): a changelog's *change
	err    error // why it is dead-lettered
	out    outcome
	noop   bool   // a middleware settled it: acknowledge only
	dlqSeq uint64 // set once the DLQ stored it
	// sc is the span of the delivery (its consumer span, or the event's trace context), for
	// the batch write's links; invalid when there is none.
	sc trace.SpanContext
}

func (e *entry) deadLetter(err error) {
	e.out, e.err = outDeadLetter, err
}

// batch is the events of one partition written together, with what the sink keeps across
// retries of the same batch.
type batch struct {
	topic   string
	p       int
	entries []*entry
	memo    any // the strategy's, kept across retries of the batch
}

// engine consumes a projection's topics as one consumer group through package partition and
// writes each partition's deliveries in batches: the handler appends a delivery to its
// partition's batch and returns at once (ManualAck); a partition's flusher writes a batch
// when it is full or has waited Linger (apply), dead-letters what apply refused, and
// acknowledges the batch with one AckBatch.
type engine struct {
	name  string // the projection (metric and log label)
	group string
	cfg   Config
	bus   Bus
	dl    DeadLetters
	log   *slog.Logger
	m     *metrics
	mws   []jetbus.HandlerMiddleware
	s     strategy
	// tracer is nil when the projection does not trace; target are the write spans'
	// database attributes.
	tracer trace.Tracer
	target []attribute.KeyValue
	// waitHook, when set (tests), is called with the subscribers once run has started them,
	// before it waits for ctx or a subscriber to end; reported counts the subscribers seen
	// ended.
	waitHook func(subs []*partition.Subscriber, reported func() int)

	// settled counts events written (or skipped), counted before their acknowledgement is
	// sent: whoever reads the group's lag from the server and then this count sees every
	// event the lag no longer holds (the rebuild's progress does).
	settled atomic.Uint64

	mu      sync.Mutex
	parts   map[partKey]*partState
	subs    []*partition.Subscriber
	running bool
	lastErr error
	errAt   time.Time
	okAt    time.Time
}

type partKey struct {
	topic string
	p     int
}

// run consumes until ctx is done, then stops every partition (each writes what it holds,
// within StopTimeout, and acknowledges it) and returns nil; or returns the error that stopped
// a subscriber by itself (also when ctx ended meanwhile).
func (e *engine) run(ctx context.Context) error {
	e.parts = map[partKey]*partState{}
	opts := []jetbus.SubscribeOption{
		jetbus.ManualAck(), jetbus.From(*e.cfg.From), jetbus.BatchSize(e.cfg.BatchSize),
		jetbus.MaxInFlight(e.cfg.MaxInFlight), jetbus.AckTimeout(e.cfg.AckTimeout),
	}
	pb := &partBus{Bus: e.bus, e: e}
	var subs []*partition.Subscriber
	stopAll := func() {
		for _, s := range subs {
			_ = s.Stop()
		}
	}
	for _, t := range e.cfg.topics() {
		s, err := partition.Subscribe(ctx, pb, e.bus.JetStream(), partition.Config{
			Topic: t, Group: e.group, MemberID: e.cfg.MemberID, TTL: e.cfg.TTL, Replicas: e.cfg.Replicas,
			// Writes are version-guarded (changelog) or checkpoint-fenced (transactional): a
			// crashed replica's partitions resume after its lease TTL, not the ack timeout.
			Fenced: true, Logger: e.log,
		}, func(context.Context, *jetbus.Delivery) error {
			return errors.New("projection: partition handler not installed") // never called: partBus installs its own
		}, opts...)
		if err != nil {
			stopAll()
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
		subs = append(subs, s)
	}
	e.mu.Lock()
	e.subs, e.running = subs, true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()

	lagDone := make(chan struct{})
	lctx, stopLag := context.WithCancel(ctx)
	go func() {
		defer close(lagDone)
		e.pollLag(lctx)
	}()
	defer func() {
		stopLag()
		<-lagDone
	}()

	stopped := make(chan *partition.Subscriber, len(subs))
	var watchers sync.WaitGroup
	for _, s := range subs {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			select {
			case <-s.Done():
				stopped <- s
			case <-ctx.Done():
			}
		}()
	}
	if e.waitHook != nil {
		e.waitHook(subs, func() int { return len(stopped) })
	}
	var err error
	select {
	case <-ctx.Done():
	case s := <-stopped:
		// A subscriber stops by itself on ctx too: when ctx ended before this select was
		// reached, both cases are ready and either may be taken. Only an error of its own,
		// or a stop while ctx runs, is a failure.
		err = s.Err()
		if err == nil && ctx.Err() == nil {
			err = fmt.Errorf("projection %s: subscriber of %s stopped: %w", e.name, e.group, jetbus.ErrClosed)
		}
	}
	stopAll()
	watchers.Wait()
	if err == nil {
		// ctx ended as a subscriber failed, and the select took ctx: the failure still counts.
		for _, s := range subs {
			if err = s.Err(); err != nil {
				break
			}
		}
	}
	return err
}

// pollLag reports the group's lag per partition, in events and in seconds, every few seconds.
func (e *engine) pollLag(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		for _, topic := range e.cfg.topics() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := e.bus.Cursor(cctx, topic, e.group)
			cancel()
			if err != nil {
				continue
			}
			now := time.Now()
			for _, p := range c.Partitions {
				e.m.setLag(e.name, topic, p.Partition, p.Pending+uint64(p.AckPending), p.LagSeconds(now))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *engine) noteErr(err error) {
	e.mu.Lock()
	e.lastErr, e.errAt = err, time.Now()
	e.mu.Unlock()
}

func (e *engine) noteOK() {
	e.mu.Lock()
	e.okAt = time.Now()
	e.mu.Unlock()
}

// owned returns the partitions this replica writes now, by topic.
func (e *engine) owned() map[string][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]int{}
	for i, s := range e.subs {
		out[e.cfg.topics()[i]] = s.Owned()
	}
	return out
}

// memberIDs returns this replica's member IDs in the group (one per topic).
func (e *engine) memberIDs() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]bool{}
	for _, s := range e.subs {
		out[s.MemberID()] = true
	}
	return out
}

// failing returns the last write error when no write succeeded since.
func (e *engine) failing() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastErr != nil && e.errAt.After(e.okAt) {
		return e.lastErr
	}
	return nil
}

// partBus is the Bus as package partition sees it: SubscribePartition installs the
// partition's batching handler and returns a Subscription whose Stop first writes and
// acknowledges what the partition holds (within StopTimeout), and only then stops the Bus's
// subscription, which returns the rest to the server. So a partition handed to another
// replica never has a write of this one landing after the next owner started.
type partBus struct {
	Bus
	e *engine
}

func (b *partBus) SubscribePartition(ctx context.Context, topic, group string, p int, _ jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error) {
	ps := b.e.newPart(topic, p)
	octx, cancel := context.WithTimeout(ctx, b.e.cfg.WriteTimeout)
	err := b.e.s.open(octx, ps)
	cancel()
	if err != nil {
		ps.abandon()
		return nil, fmt.Errorf("projection %s: open partition %d: %w", b.e.name, p, err)
	}
	inner, err := b.Bus.SubscribePartition(ctx, topic, group, p, ps.handle, opts...)
	if err != nil {
		ps.abandon()
		return nil, err
	}
	s := &partSub{ps: ps, inner: inner, stopReq: make(chan struct{}), done: make(chan struct{})}
	go s.supervise()
	return s, nil
}

// partState is one partition while this replica owns it: the deliveries held, the flusher
// that writes them, and the sink's state (a transactional projection's checkpoint).
type partState struct {
	e     *engine
	topic string
	p     int
	chain jetbus.Handler

	mu      sync.Mutex
	held    []*entry
	writing []*entry  // the batch being written, until its acknowledgement
	first   time.Time // when the oldest held entry arrived
	closed  bool      // no more entries taken
	final   bool      // write everything held, then stop
	lastSeq uint64    // highest stream sequence taken
	// ackedUpTo is the highest stream sequence of a batch whose acknowledgement started:
	// every event taken up to it is written and acknowledged, those after it are held.
	ackedUpTo uint64
	failErr   error

	kick     chan struct{}
	failed   chan struct{}
	failOnce sync.Once
	ctx      context.Context // cancelled to abandon the writes
	cancel   context.CancelFunc
	done     chan struct{} // the flusher returned

	state     any // the strategy's, set by open
	closeOnce sync.Once
}

func (e *engine) newPart(topic string, p int) *partState {
	ctx, cancel := context.WithCancel(context.Background())
	ps := &partState{e: e, topic: topic, p: p, kick: make(chan struct{}, 1), failed: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	mws := append([]jetbus.HandlerMiddleware{e.dl.Middleware()}, e.mws...)
	ps.chain = jetbus.ChainHandler(ps.accept, mws...)
	e.mu.Lock()
	e.parts[partKey{topic, p}] = ps
	e.mu.Unlock()
	go ps.run()
	return ps
}

type acceptedKey struct{}

// handle is the partition's handler: the middlewares (dead letters first), then accept. A
// delivery a middleware settled without calling accept (a replay meant for another group) is
// acknowledged with the batch; a Permanent error is the dead-letter middleware's (the event
// is in the DLQ; the Bus terminates it); any other error stops the partition after writing
// what came before, so that the failed delivery and those after it are delivered again in
// order (a projection never lets an event pass another).
func (ps *partState) handle(ctx context.Context, d *jetbus.Delivery) error {
	accepted := false
	err := ps.chain(context.WithValue(ctx, acceptedKey{}, &accepted), d)
	switch {
	case err == nil && !accepted:
		ps.add(&entry{d: d, noop: true, out: outSkipped})
	case err == nil:
	case jetbus.IsPermanent(err):
		return err
	default:
		ps.fail(fmt.Errorf("event %s (seq %d): %w", d.ID, d.Seq, err))
	}
	return nil
}

func (ps *partState) accept(ctx context.Context, d *jetbus.Delivery) error {
	if p, ok := ctx.Value(acceptedKey{}).(*bool); ok {
		*p = true
	}
	en := &entry{d: d}
	if ps.e.tracer != nil {
		en.sc = spanContextOf(ctx, d)
	}
	ps.e.s.decode(en)
	ps.add(en)
	return nil
}

// add holds en for the next batch. A delivery after the partition closed stays pending: the
// Bus returns it to the server when the subscription stops. A stream sequence taken already
// is a redelivery (its ack timeout passed while the partition held it): of an event still
// held, it is dropped (the Bus settles the newer delivery with the batch); of an event
// written and acknowledged (the redelivery crossed the acknowledgement), it is acknowledged
// again (see ackAgain).
func (ps *partState) add(en *entry) {
	ps.mu.Lock()
	if ps.closed || en.d.Seq <= ps.lastSeq {
		closed, written, last := ps.closed, !ps.closed && en.d.Seq <= ps.ackedUpTo, ps.lastSeq
		held := !closed && !written && ps.holds(en.d.Seq)
		ps.mu.Unlock()
		switch {
		case written:
			ps.ackAgain(en.d)
		case held:
			ps.e.log.Debug("redelivery of a held event dropped; its batch settles it", "projection", ps.e.name, "partition", ps.p, "seq", en.d.Seq)
		case !closed:
			// Never taken, yet below one taken: the Bus delivered out of order (its gap
			// check is there to prevent it). It stays unsettled and comes back after its ack
			// timeout, behind the checkpoint: the event is not applied.
			ps.e.log.Error("delivery out of order dropped: an event after it was taken first", "projection", ps.e.name, "topic", ps.topic, "partition", ps.p, "seq", en.d.Seq, "last", last)
			ps.e.m.outOfOrderDelivery(ps.e.name)
		}
		return
	}
	defer ps.mu.Unlock()
	ps.lastSeq = en.d.Seq
	ps.held = append(ps.held, en)
	if len(ps.held) == 1 {
		ps.first = time.Now()
		ps.wake()
	} else if len(ps.held) >= ps.e.cfg.BatchSize {
		ps.wake()
	}
}

// holds says whether the partition holds the event at stream sequence seq, to write or being
// written. Called with mu held.
func (ps *partState) holds(seq uint64) bool {
	for _, list := range [][]*entry{ps.held, ps.writing} {
		for _, en := range list {
			if en.d.Seq == seq {
				return true
			}
		}
	}
	return false
}

// ackAgain acknowledges a redelivery of an event this partition wrote and acknowledged. The
// Bus keeps every ManualAck delivery pending until it is settled: one left unsettled makes it
// believe for good that the application holds deliveries of the partition, and its recovery
// of deliveries lost in flight waits for the application to settle those first
// (jetstream's recoverDeliveries).
func (ps *partState) ackAgain(d *jetbus.Delivery) {
	e := ps.e
	ctx, cancel := context.WithTimeout(ps.ctx, 10*time.Second)
	defer cancel()
	err := e.bus.AckBatch(ctx, ps.topic, e.group, d.ID)
	if err != nil && !errors.Is(err, jetbus.ErrUnknownEvent) {
		e.log.Warn("acknowledging the redelivery of a written event failed; it is delivered again and skipped", "projection", e.name, "partition", ps.p, "seq", d.Seq, "err", err)
		return
	}
	e.log.Debug("redelivery of a written event acknowledged", "projection", e.name, "partition", ps.p, "seq", d.Seq)
}

func (ps *partState) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// fail stops taking deliveries and makes the subscription end after the held ones are
// written (see partSub.supervise).
func (ps *partState) fail(err error) {
	ps.failOnce.Do(func() {
		ps.e.log.Warn("projection partition stops after a failed delivery; it restarts from that event", "projection", ps.e.name, "topic", ps.topic, "partition", ps.p, "err", err)
		ps.mu.Lock()
		ps.closed = true
		ps.failErr = err
		ps.mu.Unlock()
		close(ps.failed)
	})
}

// finish writes everything held, within StopTimeout, then stops the flusher.
func (ps *partState) finish() {
	ps.mu.Lock()
	ps.closed, ps.final = true, true
	ps.mu.Unlock()
	ps.wake()
	t := time.NewTimer(ps.e.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-ps.done:
	case <-t.C:
		ps.e.log.Warn("projection partition stopped before writing everything it held; the rest is delivered again", "projection", ps.e.name, "topic", ps.topic, "partition", ps.p)
		ps.abandon()
	}
}

// abandon stops the flusher at once; nothing more is written or acknowledged.
func (ps *partState) abandon() {
	ps.mu.Lock()
	ps.closed = true
	ps.mu.Unlock()
	ps.cancel()
	<-ps.done
	ps.closeOnce.Do(func() { ps.e.s.close(ps) })
	ps.e.mu.Lock()
	if ps.e.parts[partKey{ps.topic, ps.p}] == ps {
		delete(ps.e.parts, partKey{ps.topic, ps.p})
	}
	ps.e.mu.Unlock()
}

// run is the flusher: it writes a batch when BatchSize entries are held or the oldest has
// waited Linger, one batch at a time, so a partition's batches are written in order.
func (ps *partState) run() {
	defer close(ps.done)
	stop, kept := make(chan struct{}), make(chan struct{})
	go ps.keep(stop, kept)
	defer func() {
		close(stop)
		<-kept
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	cfg := ps.e.cfg
	for {
		ps.mu.Lock()
		n := len(ps.held)
		var take []*entry
		wait := time.Duration(-1)
		switch {
		case n >= cfg.BatchSize || (ps.final && n > 0):
			take = ps.held[:min(n, cfg.BatchSize)]
		case n == 0 && ps.final:
			ps.mu.Unlock()
			return
		case n > 0:
			wait = cfg.Linger - time.Since(ps.first)
			if wait <= 0 {
				take = ps.held
			}
		}
		if take != nil {
			rest := make([]*entry, n-len(take), max(n-len(take), cfg.BatchSize))
			copy(rest, ps.held[len(take):])
			ps.held = rest
			ps.first = time.Now()
			ps.writing = take // in the same step: add looks for a redelivery's event in both
		}
		ps.mu.Unlock()
		if take != nil {
			if !ps.flush(take) {
				return
			}
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-ps.kick:
		case <-tc:
		case <-ps.ctx.Done():
			return
		}
		if tc != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// flush writes one batch, retrying transient failures until it succeeds (keeping the
// deliveries alive meanwhile), then dead-letters what the sink refused and acknowledges the
// batch. It returns false when it gave up: the partition is abandoned or moved. entries are
// ps.writing (run set it) until it returns.
func (ps *partState) flush(entries []*entry) bool {
	e := ps.e
	b := &batch{topic: ps.topic, p: ps.p, entries: entries}
	ctx := ps.ctx
	defer func() {
		ps.mu.Lock()
		ps.writing = nil
		ps.mu.Unlock()
	}()
	bo := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
		tctx, span := e.startWrite(tctx, b, attempt)
		err := e.s.apply(tctx, ps, b)
		endWrite(span, err)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		e.noteErr(err)
		e.m.retry(e.name)
		e.log.Warn("projection write failed; retrying, nothing acknowledged", "projection", e.name, "topic", ps.topic, "partition", ps.p, "events", len(entries), "err", err)
		if !ps.keepAlive(b) || !bo.Wait(ctx.Done()) {
			return false
		}
	}
	e.noteOK()
	bo.Reset()
	for _, en := range entries {
		for en.out == outDeadLetter && en.dlqSeq == 0 {
			seq, err := e.dl.DeadLetter(en.traced(ctx), en.d, dlq.ReasonProjection, en.err)
			if err == nil {
				en.dlqSeq = seq
				e.log.Info("event dead-lettered", "projection", e.name, "id", en.d.ID, "seq", en.d.Seq, "err", en.err)
				break
			}
			if ctx.Err() != nil {
				return false
			}
			e.log.Warn("dead-lettering failed; retrying", "projection", e.name, "id", en.d.ID, "err", err)
			if !ps.keepAlive(b) || !bo.Wait(ctx.Done()) {
				return false
			}
		}
	}
	ids := make([]string, 0, len(entries))
	counts := map[string]int{}
	for _, en := range entries {
		ids = append(ids, en.d.ID)
		counts[en.out.label()]++
	}
	// Before the acknowledgement: a redelivery handled from here on is acknowledged by add
	// (ackAgain), one handled before is settled by the AckBatch below.
	ps.mu.Lock()
	ps.ackedUpTo = max(ps.ackedUpTo, entries[len(entries)-1].d.Seq)
	ps.mu.Unlock()
	e.settled.Add(uint64(len(entries)))
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := e.bus.AckBatch(actx, ps.topic, e.group, ids...)
	cancel()
	switch {
	case errors.Is(err, jetbus.ErrUnknownEvent):
		e.log.Debug("acknowledging a batch: some deliveries were handed back meanwhile; they are delivered again and skipped", "projection", e.name, "partition", ps.p, "err", err)
	case err != nil:
		e.log.Warn("acknowledging a batch failed; it is delivered again and skipped", "projection", e.name, "partition", ps.p, "err", err)
	}
	for label, n := range counts {
		e.m.event(e.name, label, n)
	}
	e.m.batchSize(e.name, len(entries))
	return true
}

func (o outcome) label() string {
	switch o {
	case outCoalesced:
		return outcomeCoalesced
	case outStale:
		return outcomeStale
	case outSkipped:
		return outcomeSkipped
	case outDeadLetter:
		return outcomeDeadLettered
	}
	return outcomeWritten
}

// keep restarts, every third of AckTimeout until stop is closed, the ack timeout of the
// deliveries the partition holds: the batch being written and those waiting behind it. A
// delivery whose ack timeout passes is delivered again, and every delivery counts against the
// subscription's MaxDeliver: held through a few ack timeouts (MongoDB slow or failing, a
// write retried with a backoff that grows past the ack timeout, deliveries queued behind
// slow batches), events would be given up by the server (to the dead-letter queue, through
// its MAX_DELIVERIES advisory) while this replica still writes them. Deliveries acknowledged
// or handed back meanwhile are unknown to the Bus by then and skipped (ErrUnknownEvent).
func (ps *partState) keep(stop <-chan struct{}, kept chan<- struct{}) {
	defer close(kept)
	t := time.NewTicker(max(ps.e.cfg.AckTimeout/3, time.Millisecond))
	defer t.Stop()
	var ids []string
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ids = ids[:0]
		ps.mu.Lock()
		for _, en := range ps.writing {
			ids = append(ids, en.d.ID)
		}
		for _, en := range ps.held {
			ids = append(ids, en.d.ID)
		}
		ps.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(ps.ctx, 5*time.Second)
		err := ps.e.bus.InProgress(ctx, ps.topic, ps.e.group, ids...)
		cancel()
		if err != nil && !errors.Is(err, jetbus.ErrUnknownEvent) && ps.ctx.Err() == nil {
			ps.e.log.Debug("keeping held deliveries alive failed", "projection", ps.e.name, "partition", ps.p, "err", err)
		}
	}
}

// keepAlive restarts the ack timeout of a batch's deliveries while its write is retried. It
// returns false when the deliveries are no longer this replica's (handed back on a stop):
// the batch is then abandoned, and the next owner gets its events.
func (ps *partState) keepAlive(b *batch) bool {
	ids := make([]string, 0, len(b.entries))
	for _, en := range b.entries {
		ids = append(ids, en.d.ID)
	}
	ctx, cancel := context.WithTimeout(ps.ctx, 5*time.Second)
	defer cancel()
	err := ps.e.bus.InProgress(ctx, ps.topic, ps.e.group, ids...)
	if errors.Is(err, jetbus.ErrUnknownEvent) {
		ps.e.log.Info("batch abandoned: its deliveries were handed back", "projection", ps.e.name, "partition", ps.p)
		return false
	}
	return true
}

// partSub is the Subscription package partition holds for a partition.
type partSub struct {
	ps       *partState
	inner    jetbus.Subscription
	stopReq  chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error
}

// supervise ends the partition: on Stop (write what is held, then stop the Bus's
// subscription, which hands the rest back in order), on a failed delivery (the same, then the
// subscription reports that error and package partition starts it again), or when the Bus's
// subscription ended by itself (nothing more can be acknowledged: abandon).
func (s *partSub) supervise() {
	defer close(s.done)
	select {
	case <-s.stopReq:
		s.ps.finish()
		_ = s.inner.Stop()
	case <-s.ps.failed:
		s.ps.finish()
		_ = s.inner.Stop()
		s.err = s.ps.failErr
	case <-s.inner.Done():
		s.ps.abandon()
		s.err = s.inner.Err()
		return
	}
	s.ps.abandon()
}

func (s *partSub) Stop() error {
	s.stopOnce.Do(func() { close(s.stopReq) })
	<-s.done
	return nil
}

func (s *partSub) Drain(ctx context.Context) error {
	_ = s.Stop()
	return ctx.Err()
}

func (s *partSub) Done() <-chan struct{} { return s.done }

func (s *partSub) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
