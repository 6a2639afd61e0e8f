package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// LivePrefix starts the subjects members answer liveness probes on: LiveSubject.
const LivePrefix = "$JETBUS.LIVE."

// LiveSubject returns the subject the member of group answers liveness probes on:
// "$JETBUS.LIVE.<group>.<member>". A probe is a request with an empty body; the member answers
// with its ID. What matters is the server's answer when nobody subscribes: "no responders".
func LiveSubject(group, member string) string { return LivePrefix + group + "." + member }

// liveSubject returns this member's liveness subject once it answers there, else "".
func (g *Group) liveSubject() string {
	if p := g.live.Load(); p != nil {
		return *p
	}
	return ""
}

// probeResult is what a liveness probe found out.
type probeResult int

const (
	// probeAnswered: the member answered; it is alive.
	probeAnswered probeResult = iota
	// probeNoAnswer: no answer in time, or the request failed: the member may be paused (a
	// GC pause, a stopped process) with its connection still on the server, or this
	// member's own connection is down. Nothing is known.
	probeNoAnswer
	// probeGone: the server answered "no responders": it knows no subscription on the
	// subject, so the member's connection is gone from the cluster (or reconnecting).
	probeGone
)

func (r probeResult) String() string {
	switch r {
	case probeAnswered:
		return "answered"
	case probeNoAnswer:
		return "no answer"
	case probeGone:
		return "no responders"
	}
	return fmt.Sprintf("probeResult(%d)", int(r))
}

// probe sends one liveness probe to subject and waits up to timeout.
func probe(ctx context.Context, nc *nats.Conn, subject string, timeout time.Duration) probeResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := nc.RequestWithContext(ctx, subject, nil)
	switch {
	case err == nil:
		return probeAnswered
	case errors.Is(err, nats.ErrNoResponders):
		return probeGone
	}
	return probeNoAnswer
}

// liveness is one member's part in telling a dead member from a slow one by what the NATS
// server knows: it answers probes on its own subject, and it probes the members whose
// heartbeats stopped, removing (a purge on the revision of its last heartbeat) the member key
// of one the server twice reports gone, Confirm apart. See the package doc, "Liveness".
//
// A liveness whose own probe found no answer at start is disabled: it neither answers nor
// probes, and the member does not advertise a subject, so nobody probes it.
type liveness struct {
	g    *Group
	nc   *nats.Conn
	to   Timeouts
	log  *slog.Logger
	self string

	sub     *nats.Subscription // nil: disabled
	status  chan nats.Status
	started bool          // start was called
	done    chan struct{} // closed when run returns

	mu      sync.Mutex
	upSince time.Time // when this member's connection last (re)connected; zero while down
	epoch   uint64    // counts this connection's status changes
	synced  bool      // the member view holds every member
	peers   map[string]*peer

	// Probe outcomes, for tests and logs.
	answered, noAnswer, gone, removed atomic.Int64
}

// peer is what liveness knows of another member.
type peer struct {
	live    string        // its liveness subject ("" : never probed)
	confirm time.Duration // how far apart two "no responders" must be (confirmFor)
	rev     uint64        // revision of its last heartbeat
	seen    time.Time     // when that heartbeat was stored or seen here, whichever was earlier
	probing bool
	next    time.Time // no probe before then

	goneAt    time.Time // when the first probe the server answered "no responders" was sent
	goneEpoch uint64    // this connection's epoch then
}

// startLiveness subscribes this member's liveness subject on nc and checks with a probe of
// its own that the server routes probes to it and lets it answer (NATS permissions:
// deploy/README.md). On success the group's members and leases advertise the subject.
func startLiveness(ctx context.Context, g *Group, nc *nats.Conn, log *slog.Logger) *liveness {
	l := &liveness{
		g: g, nc: nc, to: g.timeout, log: log, self: g.cfg.MemberID,
		done: make(chan struct{}), peers: map[string]*peer{},
		// Settled at start: the connection reached the cluster's JetStream to open the group.
		upSince: time.Now().Add(-g.timeout.Confirm),
	}
	if nc == nil {
		return l
	}
	subject := LiveSubject(g.cfg.Group, g.cfg.MemberID)
	id := []byte(g.cfg.MemberID)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(id) })
	if err == nil {
		err = nc.FlushWithContext(ctx)
	}
	if err == nil {
		if r := probe(ctx, nc, subject, 2*time.Second); r != probeAnswered {
			err = fmt.Errorf("a probe of its own found %s", r)
		}
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		log.Warn("liveness probes unavailable (NATS permissions for "+LivePrefix+">?): a crashed member's partitions resume after the lease TTL",
			"subject", subject, "err", err)
		return l
	}
	l.sub = sub
	l.status = nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	g.reconnect.Store(int64(reconnectBound(nc)))
	g.live.Store(&subject)
	return l
}

// Bounds of the confirm window a member's advertised reconnect gives its probers
// (confirmFor).
const (
	// confirmMargin is added to a member's advertised reconnect: dialing, the handshake,
	// its subscriptions sent again and carried to the other servers, a loaded machine.
	confirmMargin = 250 * time.Millisecond
	// minConfirm is the shortest window, whatever a member advertises.
	minConfirm = 500 * time.Millisecond
)

// reconnectBound returns how long nc takes at most to come back after the server dropped
// it: a client of a cluster tries another server at once, but once it tried them all (one
// server) it waits its ReconnectWait plus up to its jitter (TLS: the TLS jitter) before
// the next attempt. Zero when nc's reconnect delay is its application's own
// (CustomReconnectDelayCB): unknown. A connection that does not reconnect gives the least.
func reconnectBound(nc *nats.Conn) time.Duration {
	o := nc.Opts
	switch {
	case !o.AllowReconnect:
		return time.Nanosecond
	case o.CustomReconnectDelayCB != nil:
		return 0
	}
	jitter := o.ReconnectJitter
	if o.Secure || o.TLSConfig != nil || nc.TLSRequired() {
		jitter = o.ReconnectJitterTLS
	}
	return o.ReconnectWait + jitter
}

// confirmFor returns the confirm window of a member that advertises reconnect (zero: it
// does not; the default, to.Confirm): its reconnect plus confirmMargin, at least minConfirm,
// and not beyond the member TTL, after which its key expires anyway.
func confirmFor(to Timeouts, reconnect time.Duration) time.Duration {
	if reconnect <= 0 {
		return to.Confirm
	}
	return min(max(reconnect+confirmMargin, minConfirm), to.LeaseTTL)
}

func (l *liveness) enabled() bool { return l.sub != nil }

// tick is how often silent members are looked for (and a lease's holder is looked at): often
// enough that a probe goes out within a small fraction of a heartbeat of being due.
func (l *liveness) tick() time.Duration { return max(l.to.Heartbeat/20, 10*time.Millisecond) }

// start probes silent members from a goroutine until ctx ends. It does nothing when disabled.
func (l *liveness) start(ctx context.Context) {
	if !l.enabled() {
		return
	}
	l.started = true
	go l.run(ctx)
}

func (l *liveness) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.tick())
	defer t.Stop()
	status := l.status
	for {
		select {
		case <-ctx.Done():
			return
		case st, ok := <-status:
			if !ok {
				status = nil
				continue
			}
			l.mu.Lock()
			l.epoch++
			if st == nats.CONNECTED {
				l.upSince = time.Now()
			} else {
				l.upSince = time.Time{}
			}
			l.mu.Unlock()
		case <-t.C:
			l.check(ctx)
		}
	}
}

// stop stops answering probes, once the context start was given has ended. Call it after the
// member released its leases and left: until then, probes must find it.
func (l *liveness) stop() {
	if !l.enabled() {
		return
	}
	if l.started {
		<-l.done
	}
	_ = l.sub.Unsubscribe()
	l.nc.RemoveStatusListener(l.status)
}

// observe records a membership event of the member view.
func (l *liveness) observe(ev MemberEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.Op {
	case MembersSynced:
		l.synced = true
	case MemberUp:
		p := l.peers[ev.ID]
		if p == nil {
			p = &peer{}
			l.peers[ev.ID] = p
		}
		// Seen when the server stored it, if that is earlier than now (a member found by a
		// watch that just started may have been silent for a while). A clock ahead of the
		// server's only makes members look silent sooner: it costs probes, never a verdict.
		seen := time.Now()
		if ls := ev.Info.LastSeen; !ls.IsZero() && ls.Before(seen) {
			seen = ls
		}
		p.live, p.rev, p.seen = ev.Info.Live, ev.Revision, seen
		p.confirm = confirmFor(l.to, ev.Info.Reconnect)
		p.next, p.goneAt = time.Time{}, time.Time{}
	default:
		delete(l.peers, ev.ID)
	}
}

// reset forgets the member view (the member watcher starts again).
func (l *liveness) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.synced = false
	l.peers = map[string]*peer{}
}

// departed reports whether member id has left the member view (left, expired, or removed as
// dead), as far as a complete view tells.
func (l *liveness) departed(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.synced && l.peers[id] == nil
}

// stableLocked reports whether this member's connection has been up for Confirm since its last
// reconnect: a server this member just reconnected to may not know every other server's
// subscriptions yet, and members reconnecting after the same outage come back within that
// long of each other.
func (l *liveness) stableLocked(now time.Time) bool {
	return !l.upSince.IsZero() && now.Sub(l.upSince) >= l.to.Confirm
}

// probe sends one probe and counts its outcome.
func (l *liveness) probe(ctx context.Context, subject string) probeResult {
	r := probe(ctx, l.nc, subject, l.to.Probe)
	switch r {
	case probeAnswered:
		l.answered.Add(1)
	case probeNoAnswer:
		l.noAnswer.Add(1)
	case probeGone:
		l.gone.Add(1)
	}
	return r
}

// check starts a probe of every member silent for Suspect that is not being probed already.
func (l *liveness) check(ctx context.Context) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.synced || !l.stableLocked(now) {
		return
	}
	for id, p := range l.peers {
		if id == l.self || p.live == "" || p.probing || now.Before(p.next) || now.Sub(p.seen) < l.to.Suspect {
			continue
		}
		p.probing = true
		go l.probePeer(ctx, id, p.live, p.rev)
	}
}

// probePeer probes member id, silent since its heartbeat at revision rev, and removes its
// member key when this is the second probe, the peer's confirm window after the first
// (confirmFor: its advertised reconnect, else Confirm), that the server answered
// "no responders", with this member's connection up all along and no heartbeat of id since.
func (l *liveness) probePeer(ctx context.Context, id, subject string, rev uint64) {
	sent := time.Now()
	r := l.probe(ctx, subject)
	l.mu.Lock()
	p := l.peers[id]
	if p == nil {
		l.mu.Unlock()
		return
	}
	p.probing = false
	if p.rev != rev {
		l.mu.Unlock()
		return // it heartbeated meanwhile
	}
	dead := false
	switch {
	case r == probeAnswered:
		p.goneAt, p.next = time.Time{}, sent.Add(l.to.Confirm)
	case r == probeNoAnswer:
		// Paused, or this member's connection is down: nothing known; look again soon.
		p.goneAt, p.next = time.Time{}, sent.Add(l.to.Suspect/2)
	case p.goneAt.IsZero() || p.goneEpoch != l.epoch || !l.stableLocked(p.goneAt):
		p.goneAt, p.goneEpoch, p.next = sent, l.epoch, sent.Add(p.confirm)
	case sent.Sub(p.goneAt) >= p.confirm:
		dead = true
		p.next = sent.Add(l.to.Suspect)
	}
	goneFor := sent.Sub(p.goneAt)
	silent := sent.Sub(p.seen)
	l.mu.Unlock()
	if !dead {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, l.to.Renew)
	defer cancel()
	err := l.g.kv.Purge(pctx, MemberKey(l.g.cfg.Topic, id), natsjs.LastRevision(rev))
	if err != nil {
		l.log.Debug("removing a member the server reports gone failed", "member", id, "err", err)
		return
	}
	l.removed.Add(1)
	l.log.Info("member removed: the server reports its connection gone", "member", id,
		"silent", silent.Round(time.Millisecond), "gone_for", goneFor.Round(time.Millisecond))
}

// reapLease removes partition p's lease (a purge on its revision) when its holder has left
// the member view and the server reports no subscription on the holder's liveness subject,
// so that this member can take p at once. It returns the holder it found, "" when the lease
// is not held by another member or was removed.
func (s *Subscriber) reapLease(ctx context.Context, p int) string {
	cur, err := s.g.ReadLease(ctx, p)
	if err != nil || cur.State != LeaseHeld || cur.Owner == s.cfg.MemberID {
		return ""
	}
	l := s.live
	l.mu.Lock()
	stable := l.stableLocked(time.Now())
	l.mu.Unlock()
	if cur.Live == "" || !stable || !l.departed(cur.Owner) {
		return cur.Owner
	}
	if l.probe(ctx, cur.Live) != probeGone {
		return cur.Owner
	}
	pctx, cancel := context.WithTimeout(ctx, s.to.Renew)
	defer cancel()
	if err := s.g.kv.Purge(pctx, LeaseKey(s.cfg.Topic, p), natsjs.LastRevision(cur.Revision)); err != nil {
		s.log.Debug("removing the lease of a member the server reports gone failed", "partition", p, "holder", cur.Owner, "err", err)
		return cur.Owner
	}
	l.removed.Add(1)
	s.log.Info("lease removed: its holder left and the server reports its connection gone", "partition", p, "holder", cur.Owner)
	return ""
}

// awaitLease waits until partition p's lease, held by another member, is released or
// expires, or (Config.Fenced) until its holder is found gone and the lease removed
// (reapLease); ctx bounds the wait, which ends after two lease TTLs anyway.
func (s *Subscriber) awaitLease(ctx context.Context, p int) {
	wctx, cancel := context.WithTimeout(ctx, 2*s.to.LeaseTTL)
	defer cancel()
	if !s.cfg.Fenced || !s.live.enabled() {
		_, _ = s.g.WaitFree(wctx, p)
		return
	}
	freed := make(chan struct{})
	go func() {
		defer close(freed)
		_, _ = s.g.WaitFree(wctx, p)
	}()
	t := time.NewTicker(s.live.tick())
	defer t.Stop()
	holder := ""
	var next time.Time
	for {
		if now := time.Now(); !now.Before(next) && (holder == "" || s.live.departed(holder)) {
			holder = s.reapLease(wctx, p)
			next = now.Add(s.to.Suspect / 2)
		}
		select {
		case <-freed:
			return
		case <-t.C:
		}
	}
}
