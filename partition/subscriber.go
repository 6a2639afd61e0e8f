package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

// Consumer is what a partitioned subscription needs from the Bus (package jetstream's *Bus
// implements it). Subscribe is called with jetbus.OnlyPartitions(p) and jetbus.TakeOver() for
// one partition p at a time, and must consume it through the durable consumer named
// "<group>_p<p>" on the topic's stream (see DESIGN.md, "On the wire"), with
// jetbus.Subscription.Stop returning unstarted deliveries to the server. Both methods are
// called from several goroutines at once.
type Consumer interface {
	// Partitions returns the topic's partition count.
	Partitions(ctx context.Context, topic string) (int, error)
	// Subscribe consumes the topic as the group, calling h for every event.
	Subscribe(ctx context.Context, topic, group string, h jetbus.Handler, opts ...jetbus.SubscribeOption) (jetbus.Subscription, error)
}

// Subscriber is one member of a partitioned consumer group: it consumes the partitions the
// group's assignment gives it, each under a lease. Stop it with Stop or Drain.
type Subscriber struct {
	c    Consumer
	js   natsjs.JetStream
	g    *Group
	cfg  Config
	to   Timeouts
	h    jetbus.Handler
	opts []jetbus.SubscribeOption
	n    int
	log  *slog.Logger

	runCtx    context.Context // runners; cancelled to stop
	runCancel context.CancelFunc
	subCtx    context.Context // the Bus subscriptions; cancelled once everything stopped
	subCancel context.CancelFunc

	stopOnce sync.Once
	stopCh   chan struct{}
	drainCtx context.Context // set before stopCh closes when draining
	done     chan struct{}

	ackWait time.Duration // the subscription's AckTimeout

	mu    sync.Mutex
	owned map[int]*Lease
	dirty map[int]time.Time // partitions this member stopped without settling, and when
	err   error             // last transient failure
	fatal error             // what stopped the subscriber by itself
}

// Subscribe joins cfg.Group as a member consuming cfg.Topic and returns at once; the member
// then takes the partitions the group's assignment gives it, each under a lease, and calls h
// for their events (Delivery.Topic is the logical topic, Delivery.Partition the partition).
// It stops when ctx is done or on Stop or Drain: it stops fetching, finishes or returns the
// deliveries in flight, releases its leases and leaves the group.
//
// c is the Bus (package jetstream), js the JetStream context for the KV buckets.
//
// Config fields (see Config): Topic, Group (required), MemberID, TTL, Replicas, Version,
// Logger. opts are the Bus's subscribe options (jetbus.From…, BatchSize, MaxInFlight,
// AckTimeout, MaxAttempts, Backoff, Filter, ManualAck, Use, KeyConcurrency) and apply to
// every partition. FanIn, OnlyPartitions and TakeOver are refused (jetbus.ErrInvalidOption):
// the subscriber sets the last two itself.
//
// Errors: jetbus.ErrInvalidTopic, jetbus.ErrInvalidGroup, ErrInvalidConfig (Config.Validate),
// jetbus.ErrInvalidOption (nil handler, bad options), ErrNoPartitions, ErrTTLMismatch, and the
// Bus's and KV's errors (jetbus.ErrTopicNotFound, …).
//
// Timeouts (see Timeouts): a member heartbeats every TTL/3 and drops out TTL after its last
// heartbeat; an owner renews each lease every TTL/3 and stops the partition itself when no
// renewal succeeded for 4·TTL/5. A new owner starts at once after a release; after an expiry
// it waits until the dead owner's last delivery is older than the subscription's AckTimeout,
// so the events it had in flight are redelivered first, in order. Two members therefore never
// run the handler on the same partition at once as long as the handler returns within
// AckTimeout, which it must anyway (a slower handler sees its event twice).
func Subscribe(ctx context.Context, c Consumer, js natsjs.JetStream, cfg Config, h jetbus.Handler, opts ...jetbus.SubscribeOption) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", jetbus.ErrInvalidOption)
	}
	if c == nil || js == nil {
		return nil, fmt.Errorf("%w: nil Consumer or JetStream", ErrInvalidConfig)
	}
	o, err := jetbus.ApplySubscribeOptions(opts...)
	if err != nil {
		return nil, err
	}
	switch {
	case len(o.FanIn) > 0:
		return nil, fmt.Errorf("%w: FanIn is not supported by a partitioned subscription", jetbus.ErrInvalidOption)
	case o.Partitions != nil:
		return nil, fmt.Errorf("%w: OnlyPartitions is set by the partitioned subscription", jetbus.ErrInvalidOption)
	case o.TakeOver:
		return nil, fmt.Errorf("%w: TakeOver is set by the partitioned subscription", jetbus.ErrInvalidOption)
	}
	n, err := c.Partitions(ctx, cfg.Topic)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: %s reports %d", ErrNoPartitions, cfg.Topic, n)
	}
	g, err := OpenGroup(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{
		c: c, js: js, g: g, cfg: g.cfg, to: g.timeout, h: h, opts: slices.Clone(opts), n: n,
		log:     g.cfg.Logger.With("topic", cfg.Topic, "group", cfg.Group, "member", g.cfg.MemberID),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		owned:   make(map[int]*Lease),
		dirty:   make(map[int]time.Time),
		ackWait: o.AckTimeout,
	}
	s.runCtx, s.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	s.subCtx, s.subCancel = context.WithCancel(context.WithoutCancel(ctx))

	mw, err := g.watchMembers(s.runCtx)
	if err != nil {
		s.runCancel()
		s.subCancel()
		return nil, err
	}
	aw, err := g.watchAssignment(s.runCtx)
	if err != nil {
		mw.Stop()
		s.runCancel()
		s.subCancel()
		return nil, fmt.Errorf("partition: watch assignment: %w", err)
	}
	m, err := g.Join(s.runCtx)
	if err != nil {
		mw.Stop()
		_ = aw.Stop()
		s.runCancel()
		s.subCancel()
		return nil, err
	}
	stopOnCancel := context.AfterFunc(ctx, func() { s.stop(nil) })
	go func() {
		s.run(mw, aw, m)
		stopOnCancel()
	}()
	return s, nil
}

// MemberID returns this member's ID in the group.
func (s *Subscriber) MemberID() string { return s.cfg.MemberID }

// Owned returns the partitions this member consumes now, in increasing order.
func (s *Subscriber) Owned() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]int, 0, len(s.owned))
	for p := range s.owned {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (s *Subscriber) stop(drainCtx context.Context) {
	s.stopOnce.Do(func() {
		s.drainCtx = drainCtx
		close(s.stopCh)
	})
}

// Stop stops fetching, waits for running handlers, returns unstarted deliveries to the server,
// releases the leases and leaves the group. It is idempotent.
func (s *Subscriber) Stop() error {
	s.stop(nil)
	<-s.done
	return nil
}

// Drain is Stop, except that the events already fetched are handled first. ctx bounds the
// wait; when it is done, Drain behaves as Stop and returns ctx's error.
func (s *Subscriber) Drain(ctx context.Context) error {
	s.stop(ctx)
	<-s.done
	return ctx.Err()
}

// Done is closed once the subscriber has stopped and left the group.
func (s *Subscriber) Done() <-chan struct{} { return s.done }

// Err returns the error that stopped the subscriber by itself: jetbus.ErrClosed when its
// NATS connection was closed. It is nil while running and after Stop or Drain. Transient
// failures (a failed assignment write, subscribe or renewal) are retried and reported by
// LastError.
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// LastError returns the last transient failure (a failed assignment write, subscribe, lease
// acquisition or renewal, a lost lease), or nil.
func (s *Subscriber) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscriber) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

type runner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// run is the member's control loop: it follows the member list and the stored assignment,
// advances the assignment when the member list changed, and starts and stops the partition
// owners.
func (s *Subscriber) run(mw *MemberWatcher, aw natsjs.KeyWatcher, m *Membership) {
	defer close(s.done)
	members := newMemberView()
	asg := &StoredAssignment{}
	runners := map[int]*runner{}
	exited := make(chan int, s.n)
	tick := time.NewTicker(s.to.Renew)
	defer tick.Stop()
	var memberEvents <-chan MemberEvent = mw.Events()
	var asgUpdates <-chan natsjs.KeyValueEntry = aw.Updates()

loop:
	for {
		select {
		case <-s.stopCh:
			break loop
		case ev, ok := <-memberEvents:
			if !ok {
				memberEvents = nil
				mw = nil
				continue
			}
			if !members.apply(ev) {
				continue // a heartbeat
			}
			s.log.Debug("member", "id", ev.ID, "op", ev.Op)
		case e, ok := <-asgUpdates:
			if !ok {
				asgUpdates = nil
				aw = nil
				continue
			}
			if e == nil {
				break
			}
			if e.Revision() <= asg.Revision {
				continue
			}
			a, err := decodeAssignment(e)
			if err != nil {
				s.setErr(err)
				continue
			}
			asg = a
		case p := <-exited:
			delete(runners, p)
		case <-tick.C:
			if nc := s.js.Conn(); nc != nil && nc.IsClosed() {
				s.mu.Lock()
				s.fatal = fmt.Errorf("%w: NATS connection closed", jetbus.ErrClosed)
				s.mu.Unlock()
				s.log.Warn("connection closed, stopping")
				break loop
			}
			if mw == nil {
				if w, err := s.g.watchMembers(s.runCtx); err == nil {
					mw, memberEvents, members = w, w.Events(), newMemberView()
				}
			}
			if aw == nil {
				if w, err := s.g.watchAssignment(s.runCtx); err == nil {
					aw, asgUpdates = w, w.Updates()
				}
			}
		}
		asg = s.reconcile(members, asg, runners, exited)
	}

	// Shutdown: stop every partition (stop fetching, settle or return in-flight deliveries,
	// release the lease), then leave.
	s.runCancel()
	for len(runners) > 0 {
		delete(runners, <-exited)
	}
	if mw != nil {
		mw.Stop()
	}
	if aw != nil {
		_ = aw.Stop()
	}
	lctx, cancel := context.WithTimeout(context.Background(), s.to.LeaseTTL)
	if err := m.Leave(lctx); err != nil {
		s.log.Warn("leave failed; the member key will expire", "err", err)
	}
	cancel()
	s.subCancel()
}

func (s *Subscriber) reconcile(members *memberView, asg *StoredAssignment, runners map[int]*runner, exited chan int) *StoredAssignment {
	live := members.members()
	if members.synced && members.up[s.cfg.MemberID] && members.rev >= asg.AsOf && !asg.matches(live, s.n) {
		ctx, cancel := context.WithTimeout(s.runCtx, s.to.Renew)
		next, err := s.g.Advance(ctx, asg, live, s.n, members.rev)
		cancel()
		switch {
		case err == nil:
			if next != asg {
				s.log.Info("assignment advanced", "members", len(live), "revision", next.Revision, "owned", Owned(next.Owners, s.cfg.MemberID))
			}
			asg = next
		case errors.Is(err, natsjs.ErrKeyRevisionMismatch), errors.Is(err, natsjs.ErrKeyExists):
			// Another member stored one first; the watch brings it.
		default:
			s.setErr(fmt.Errorf("partition: store assignment: %w", err))
		}
	}
	want := map[int]bool{}
	for _, p := range Owned(asg.Owners, s.cfg.MemberID) {
		want[p] = true
	}
	for p, r := range runners {
		if !want[p] {
			r.cancel() // graceful handoff: stop, then release
		}
	}
	for p := range want {
		if runners[p] == nil {
			ctx, cancel := context.WithCancel(s.runCtx)
			r := &runner{cancel: cancel, done: make(chan struct{})}
			runners[p] = r
			go func() {
				defer func() { exited <- p }()
				defer cancel()
				s.own(ctx, p)
			}()
		}
	}
	return asg
}

// own takes and serves partition p until ctx is done.
func (s *Subscriber) own(ctx context.Context, p int) {
	backoff := s.to.Renew / 4
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, s.to.LeaseTTL)
		lease, err := s.g.TryAcquire(actx, p)
		cancel()
		if errors.Is(err, ErrLeaseHeld) {
			// Wait for the release or the expiry; look again after a lease TTL in case a
			// marker was missed.
			wctx, cancel := context.WithTimeout(ctx, 2*s.to.LeaseTTL)
			_, _ = s.g.WaitFree(wctx, p)
			cancel()
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.setErr(err)
				s.log.Warn("acquire failed", "partition", p, "err", err)
				sleep(ctx, backoff)
			}
			continue
		}
		if s.serve(ctx, p, lease) != nil {
			sleep(ctx, backoff)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// serve consumes partition p under lease until ctx is done (then it stops and releases) or
// the lease is lost (then it stops at once).
func (s *Subscriber) serve(ctx context.Context, p int, lease *Lease) error {
	// The keeper renews the lease from now until the subscription has stopped, including
	// while it drains after a handoff began.
	kctx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	lost := make(chan error, 1)
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		if err := s.keep(kctx, p, lease); err != nil {
			lost <- err
		}
	}()
	release := func() {
		stopKeeper()
		<-keeperDone
		rctx, cancel := context.WithTimeout(context.Background(), s.to.LeaseTTL)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			s.log.Warn("release failed; the lease will expire", "partition", p, "err", err)
		}
	}
	fail := func(err error) error {
		stopKeeper()
		<-keeperDone
		// The subscription was stopped in a hurry, perhaps unable to return its deliveries:
		// if this member takes the partition again, it waits for them like a new owner would.
		s.mu.Lock()
		s.dirty[p] = time.Now()
		s.mu.Unlock()
		s.setErr(err)
		s.log.Warn("lease lost, partition stopped", "partition", p, "err", err)
		return err
	}

	s.mu.Lock()
	dirtyAt, dirty := s.dirty[p]
	s.mu.Unlock()
	if dirty {
		wait := time.Until(dirtyAt.Add(s.ackWait + s.ackWait/10 + 200*time.Millisecond))
		if wait > 0 {
			s.log.Info("waiting for this member's own unsettled deliveries to time out", "partition", p, "wait", wait)
			select {
			case <-ctx.Done():
			case err := <-lost:
				return fail(err)
			case <-time.After(wait):
			}
		}
		s.mu.Lock()
		delete(s.dirty, p)
		s.mu.Unlock()
	}
	if lease.Previous != LeaseReleased {
		// Keep the lease until the check succeeds: releasing here would let the next
		// acquisition look like a graceful handoff and skip the wait.
		for {
			err := s.waitInFlight(ctx, p, lost)
			if err == nil || ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrLeaseLost) {
				return fail(err)
			}
			s.log.Warn("in-flight check failed, retrying", "partition", p, "err", err)
			select {
			case <-ctx.Done():
			case err := <-lost:
				return fail(err)
			case <-time.After(s.to.Renew):
			}
		}
	}
	if ctx.Err() != nil {
		release()
		return nil
	}
	opts := append(slices.Clone(s.opts), jetbus.OnlyPartitions(p), jetbus.TakeOver())
	sub, err := s.c.Subscribe(s.subCtx, s.cfg.Topic, s.cfg.Group, s.h, opts...)
	if err != nil {
		release()
		s.setErr(err)
		s.log.Warn("subscribe failed", "partition", p, "err", err)
		return err
	}
	s.mu.Lock()
	s.owned[p] = lease
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.owned, p)
		s.mu.Unlock()
	}()
	s.log.Info("partition started", "partition", p, "previous", lease.Previous)

	select {
	case <-ctx.Done():
		if dctx := s.drainCtx; dctx != nil {
			// Drain, but stop at once if the lease is lost meanwhile.
			dctx, cancel := context.WithCancel(dctx)
			go func() {
				select {
				case err := <-lost:
					lost <- err
					cancel()
				case <-dctx.Done():
				}
			}()
			_ = sub.Drain(dctx)
			cancel()
		} else {
			s.stopSub(p, sub)
		}
		select {
		case err := <-lost:
			return fail(err)
		default:
		}
		s.flush()
		release()
		s.log.Info("partition handed off", "partition", p)
		return nil
	case err := <-lost:
		s.stopSub(p, sub)
		return fail(err)
	case <-sub.Done():
		release()
		err := sub.Err()
		if err == nil {
			err = fmt.Errorf("partition: subscription of partition %d ended: %w", p, jetbus.ErrClosed)
		}
		s.setErr(err)
		return err
	}
}

// stopSub stops a partition's subscription. When the connection is closed it does not wait
// longer than a renew interval for it: nothing can be settled any more, the lease expires and
// the next owner waits for the deliveries to time out.
func (s *Subscriber) stopSub(p int, sub jetbus.Subscription) {
	done := make(chan struct{})
	go func() {
		_ = sub.Stop()
		close(done)
	}()
	t := time.NewTicker(s.to.Renew)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if nc := s.js.Conn(); nc != nil && nc.IsClosed() {
				s.log.Warn("subscription did not stop after the connection closed; abandoning it", "partition", p)
				return
			}
		}
	}
}

// flush waits until the server has received everything sent on the connection so far, in
// particular the naks with which a stopped subscription returned its unstarted deliveries:
// they must reach the consumer before the next owner's first pull, or that pull gets later
// events first. (It helps when the Consumer publishes on the same connection as js.)
func (s *Subscriber) flush() {
	if nc := s.js.Conn(); nc != nil && !nc.IsClosed() {
		if err := nc.FlushTimeout(s.to.Renew); err != nil {
			s.log.Debug("flush failed", "err", err)
		}
	}
}

// keep renews lease every Renew interval until ctx is done. It returns ErrLeaseLost when the
// lease was lost or no renewal succeeded within Guard of the last one sent.
func (s *Subscriber) keep(ctx context.Context, p int, lease *Lease) error {
	guard := time.NewTimer(time.Until(lease.SentAt().Add(s.to.Guard)))
	defer guard.Stop()
	renew := time.NewTicker(s.to.Renew)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-guard.C:
			return fmt.Errorf("%w: partition %d not renewed for %s", ErrLeaseLost, p, s.to.Guard)
		case <-renew.C:
			// A renewal is useful until the guard fires: give it that long.
			rctx, cancel := context.WithDeadline(ctx, lease.SentAt().Add(s.to.Guard))
			err := lease.Renew(rctx)
			cancel()
			switch {
			case err == nil:
				guard.Reset(time.Until(lease.SentAt().Add(s.to.Guard)))
			case errors.Is(err, ErrLeaseLost):
				return err
			case ctx.Err() == nil:
				s.log.Warn("renew failed", "partition", p, "err", err)
			}
		}
	}
}

// waitInFlight waits, after a lease expired rather than being released, until the previous
// owner's deliveries of partition p are due for redelivery (its last delivery is older than
// the consumer's AckWait), so that the new owner sees them first and in order. It returns the
// keeper's error if the lease is lost meanwhile.
func (s *Subscriber) waitInFlight(ctx context.Context, p int, lost chan error) error {
	ictx, cancel := context.WithTimeout(ctx, s.to.LeaseTTL)
	cons, err := s.js.Consumer(ictx, jetbus.StreamName(s.cfg.Topic), jetbus.ConsumerName(s.cfg.Group, p))
	cancel()
	if errors.Is(err, natsjs.ErrConsumerNotFound) || ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("partition: consumer of partition %d: %w", p, err)
	}
	info := cons.CachedInfo()
	if info.NumAckPending == 0 {
		return nil
	}
	wait := info.Config.AckWait // no time of last delivery: assume it was just now
	if info.Delivered.Last != nil {
		wait -= info.TimeStamp.Sub(*info.Delivered.Last)
	}
	if wait <= 0 {
		return nil
	}
	wait += wait/10 + 200*time.Millisecond // let the server's redelivery timer fire
	s.log.Info("waiting for the previous owner's deliveries to time out", "partition", p, "wait", wait, "ack_pending", info.NumAckPending)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case err := <-lost:
		return err
	}
	return nil
}

// memberView is one member's view of the group's membership, and how far it goes: the KV
// revision of the last membership change (or heartbeat) its watcher delivered. Watchers lag
// by different amounts; a member only rewrites the stored assignment when its view is at
// least as recent as the one the assignment was computed from (StoredAssignment.AsOf), so
// two members with different views never overwrite each other back and forth.
type memberView struct {
	up     map[string]bool // members seen up and not seen go since
	rev    uint64          // revision up to which the view is complete
	synced bool            // the watcher delivered the current members
}

func newMemberView() *memberView { return &memberView{up: map[string]bool{}} }

// apply records ev and reports whether it changed the member set.
func (v *memberView) apply(ev MemberEvent) bool {
	if ev.Op == MembersSynced {
		v.synced = true
		return true
	}
	v.rev = max(v.rev, ev.Revision)
	if ev.Op == MemberUp {
		if v.up[ev.ID] {
			return false
		}
		v.up[ev.ID] = true
		return true
	}
	if !v.up[ev.ID] {
		return false
	}
	delete(v.up, ev.ID)
	return true
}

// members returns the sorted member IDs seen up.
func (v *memberView) members() []string {
	out := make([]string, 0, len(v.up))
	for id := range v.up {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
