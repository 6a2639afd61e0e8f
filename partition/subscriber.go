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
	"github.com/jetbus/jetbus/internal/retry"
)

// Subscriber is one member of a partitioned consumer group: it consumes the partitions the
// group's assignment gives it, each under a lease. Stop it with Stop or Drain.
//
// It is a jetbus.Subscription.
type Subscriber struct {
	c    jetbus.PartitionSubscriber
	js   JetStream
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
	drainCtx context.Context // set before stopCh closes when draining; read through draining
	done     chan struct{}

	ackWait time.Duration // the subscription's AckTimeout
	live    *liveness     // probes: this member's and the ones it sends (live.go)

	mu    sync.Mutex
	owned map[int]*Lease
	dirty map[int]time.Time // partitions this member stopped without settling, and when
	err   error             // last transient failure
	fatal error             // what stopped the subscriber by itself
}

var _ jetbus.Subscription = (*Subscriber)(nil)

// Subscribe joins cfg.Group as a member consuming cfg.Topic and returns at once; the member
// then takes the partitions the group's assignment gives it, each under a lease, and calls h
// for their events (Delivery.Topic is the logical topic, Delivery.Partition the partition).
// It stops when ctx is done or on Stop or Drain: it stops fetching, finishes or returns the
// deliveries in flight, releases its leases and leaves the group.
//
// bus is the Bus (package jetstream's); it must have the jetbus.PartitionSubscriber
// capability, through which each owned partition is consumed (its durable consumer
// "<group>_p<n>", see docs/wire.md, "Consumer groups"), from several goroutines at once. js is the
// JetStream context for the KV buckets.
//
// Config fields (see Config): Topic, Group (required), MemberID, TTL, Replicas, Version,
// Logger. opts are the Bus's subscribe options (jetbus.From…, BatchSize, MaxInFlight,
// AckTimeout, MaxAttempts, Backoff, Filter, ManualAck, Use, KeyConcurrency) and apply to
// every partition. FanIn and Unordered are refused (jetbus.ErrInvalidOption): leases and
// assignments keep a group's per-key order, which an unordered group does without (its
// replicas all call Bus.Subscribe with jetbus.Unordered and share every partition).
//
// Errors: jetbus.ErrInvalidTopic, jetbus.ErrInvalidGroup, ErrInvalidConfig (Config.Validate),
// jetbus.ErrInvalidOption (nil handler, bad options, a Bus without the PartitionSubscriber
// capability), ErrNoPartitions, ErrTTLMismatch, and the
// Bus's and KV's errors (jetbus.ErrTopicNotFound, …).
//
// Timeouts (see Timeouts): a member heartbeats every min(TTL/3, 250ms) and drops out TTL
// after its last heartbeat, or about 2 s after it when the server confirms its connection gone
// (see the package doc, "Liveness"); an owner renews each lease every TTL/3 and stops the
// partition itself when no renewal succeeded for 4·TTL/5. A new owner starts at once after a
// release; after an expiry it waits until the dead owner's last delivery is older than the
// subscription's AckTimeout, so the events it had in flight are redelivered first, in order.
// Two members therefore never run the handler on the same partition at once as long as the
// handler returns within AckTimeout, which it must anyway (a slower handler sees its event
// twice). With Config.Fenced a new owner does not wait for the deliveries, and takes the lease
// of a holder the server confirms gone without waiting for it to expire.
func Subscribe(ctx context.Context, bus jetbus.Bus, js JetStream, cfg Config, h jetbus.Handler, opts ...jetbus.SubscribeOption) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", jetbus.ErrInvalidOption)
	}
	if bus == nil || js == nil {
		return nil, fmt.Errorf("%w: nil Bus or JetStream", ErrInvalidConfig)
	}
	c, ok := bus.(jetbus.PartitionSubscriber)
	if !ok {
		return nil, fmt.Errorf("%w: a %T cannot subscribe to single partitions (no jetbus.PartitionSubscriber)", jetbus.ErrInvalidOption, bus)
	}
	o, err := jetbus.ApplySubscribeOptions(opts...)
	if err != nil {
		return nil, err
	}
	if len(o.FanIn) > 0 {
		return nil, fmt.Errorf("%w: FanIn is not supported by a partitioned subscription", jetbus.ErrInvalidOption)
	}
	if o.Unordered {
		return nil, fmt.Errorf("%w: a partitioned subscription is for ordered groups; an unordered group (jetbus.Unordered) needs no leases: every replica subscribes it with Bus.Subscribe", jetbus.ErrInvalidOption)
	}
	// Through a JetStream leader election or a node restart the first requests go unanswered
	// or are refused as unavailable: start again (from the partition count) until ctx ends.
	var (
		s  *Subscriber
		mw *MemberWatcher
		aw natsjs.KeyWatcher
		m  *Membership
	)
	err = retry.Do(ctx, startPolicy, func(tctx context.Context) error {
		var err error
		s, mw, aw, m, err = begin(ctx, tctx, c, js, cfg, h, opts, o.AckTimeout)
		if err != nil && retry.Transient(err) {
			cfg.Logger.Warn("subscribe: asking again", "topic", cfg.Topic, "group", cfg.Group, "err", err)
		}
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("partition: subscribe %s to %s (asked again until the context ended): %w", cfg.Group, cfg.Topic, err)
		}
		return nil, err
	}
	stopOnCancel := context.AfterFunc(ctx, func() { s.stop(nil) })
	s.live.start(s.runCtx)
	go func() {
		s.run(mw, aw, m)
		stopOnCancel()
	}()
	return s, nil
}

// startPolicy bounds each try of a subscription's start: creating a group's buckets goes
// through the meta leader, which is slow on a busy cluster.
var startPolicy = retry.Policy{Try: 10 * time.Second, Backoff: retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}}

// begin is one try of Subscribe's start: the partition count, the group's buckets, the
// watches and the membership. tctx bounds the try; what runs after it lives on ctx's values
// only. On failure it leaves nothing behind.
func begin(ctx, tctx context.Context, c jetbus.PartitionSubscriber, js JetStream, cfg Config, h jetbus.Handler,
	opts []jetbus.SubscribeOption, ackWait time.Duration) (*Subscriber, *MemberWatcher, natsjs.KeyWatcher, *Membership, error) {
	n, err := c.Partitions(tctx, cfg.Topic)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if n < 1 {
		return nil, nil, nil, nil, fmt.Errorf("%w: %s reports %d", ErrNoPartitions, cfg.Topic, n)
	}
	g, err := OpenGroup(tctx, js, cfg)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	log := g.cfg.Logger.With("topic", cfg.Topic, "group", cfg.Group, "member", g.cfg.MemberID)
	// Before joining: the member key advertises the liveness subject once it is answered.
	live := startLiveness(tctx, g, js.Conn(), log)
	s := &Subscriber{
		c: c, js: js, g: g, cfg: g.cfg, to: g.timeout, h: h, opts: slices.Clone(opts), n: n,
		log:     log,
		live:    live,
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		owned:   make(map[int]*Lease),
		dirty:   make(map[int]time.Time),
		ackWait: ackWait,
	}
	s.runCtx, s.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	s.subCtx, s.subCancel = context.WithCancel(context.WithoutCancel(ctx))
	fail := func(err error, undo ...func()) (*Subscriber, *MemberWatcher, natsjs.KeyWatcher, *Membership, error) {
		for _, u := range undo {
			u()
		}
		s.runCancel()
		s.subCancel()
		live.stop()
		return nil, nil, nil, nil, err
	}
	mw, err := g.watchMembers(s.runCtx)
	if err != nil {
		return fail(err)
	}
	aw, err := g.watchAssignment(s.runCtx)
	if err != nil {
		return fail(fmt.Errorf("partition: watch assignment: %w", retry.Opaque(err)), mw.Stop)
	}
	m, err := g.Join(s.runCtx)
	if err != nil {
		return fail(err, mw.Stop, func() { _ = aw.Stop() })
	}
	return s, mw, aw, m, nil
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

// draining is the context bounding a Drain under way; nil when the subscriber is stopping
// without draining or not stopping at all (a partition handed to another member while the
// subscriber runs on is stopped, not drained). drainCtx is read only after stopCh is seen
// closed: a hand-off may run while Stop or Drain is setting it.
func (s *Subscriber) draining() context.Context {
	select {
	case <-s.stopCh:
		return s.drainCtx
	default:
		return nil
	}
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
			s.live.observe(ev)
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
					s.live.reset()
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
	s.live.stop() // answered until now: a member draining is not gone
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
		case errors.Is(err, ErrAssignmentConflict):
			// Another member stored one first; the watch brings it.
		default:
			s.setErr(err)
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
