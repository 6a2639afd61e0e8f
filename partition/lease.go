package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// LeaseState is the state of a partition's lease key.
type LeaseState int

// Lease states.
const (
	// LeaseFree: no lease was ever written, or its expiry marker is gone too.
	LeaseFree LeaseState = iota
	// LeaseHeld: a member holds the lease.
	LeaseHeld
	// LeaseReleased: the last owner released it after stopping its subscription.
	LeaseReleased
	// LeaseExpired: the last owner stopped renewing and the lease expired, or a member
	// waiting for it removed it (a purge on its revision) after the server confirmed that
	// the holder's connection was gone (see the package doc, "Liveness").
	LeaseExpired
)

func (s LeaseState) String() string {
	switch s {
	case LeaseFree:
		return "free"
	case LeaseHeld:
		return "held"
	case LeaseReleased:
		return "released"
	case LeaseExpired:
		return "expired"
	}
	return fmt.Sprintf("LeaseState(%d)", int(s))
}

// LeaseInfo is the content of a lease key.
type LeaseInfo struct {
	Partition int       `json:"partition"`
	Owner     string    `json:"owner"`
	Acquired  time.Time `json:"acquired"`
	Renewed   time.Time `json:"renewed"`
	// Live is the holder's liveness subject (MemberInfo.Live) when it has one: a member
	// waiting for the lease may probe it there.
	Live  string     `json:"live,omitempty"`
	State LeaseState `json:"-"`
	// Revision is the KV revision of the lease key's last write.
	Revision uint64 `json:"-"`
}

// Lease is this member's hold on one partition, taken with a create and renewed with a
// revision check. It is safe for concurrent use.
type Lease struct {
	g    *Group
	p    int
	info LeaseInfo
	// Previous is how the lease ended before this member took it: LeaseReleased,
	// LeaseExpired, or LeaseFree when unknown.
	Previous LeaseState

	mu     sync.Mutex
	rev    uint64
	sentAt time.Time // when the last successful write was sent
	lost   bool
}

// ReadLease returns the state of partition p's lease, read from the bucket's stream so that a
// release (delete marker) and an expiry (limit marker) can be told apart.
func (g *Group) ReadLease(ctx context.Context, p int) (LeaseInfo, error) {
	info := LeaseInfo{Partition: p}
	msg, err := g.stream.GetLastMsgForSubject(ctx, "$KV."+GroupBucket(g.cfg.Group)+"."+LeaseKey(g.cfg.Topic, p))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("partition: read lease %d: %w", p, retry.Opaque(err))
	}
	info.Revision = msg.Sequence
	switch {
	case msg.Header.Get("KV-Operation") == "DEL":
		info.State = LeaseReleased
	case msg.Header.Get("KV-Operation") == "PURGE" || msg.Header.Get(natsjs.MarkerReasonHeader) != "":
		info.State = LeaseExpired
	default:
		info.State = LeaseHeld
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			return info, fmt.Errorf("partition: decode lease %d: %v", p, err)
		}
		info.Partition = p
	}
	return info, nil
}

// TryAcquire takes partition p's lease for this member if nobody holds it (a
// compare-and-set on the key's last revision, so of two members trying at once one wins). It
// returns ErrLeaseHeld when another member holds it. A lease this member already holds (a
// restart with the same MemberID) is taken over.
func (g *Group) TryAcquire(ctx context.Context, p int) (*Lease, error) {
	if p < 0 {
		return nil, fmt.Errorf("%w: negative partition %d", ErrInvalidConfig, p)
	}
	cur, err := g.ReadLease(ctx, p)
	if err != nil {
		return nil, err
	}
	if cur.State == LeaseHeld && cur.Owner != g.cfg.MemberID {
		return nil, fmt.Errorf("%w: partition %d by %s", ErrLeaseHeld, p, cur.Owner)
	}
	now := time.Now().UTC()
	l := &Lease{g: g, p: p, info: LeaseInfo{Partition: p, Owner: g.cfg.MemberID, Acquired: now, Renewed: now, Live: g.liveSubject()}, Previous: cur.State}
	if cur.State == LeaseHeld {
		l.Previous = LeaseFree
	}
	b, _ := json.Marshal(l.info)
	sent := time.Now()
	rev, err := g.kv.Update(ctx, LeaseKey(g.cfg.Topic, p), b, cur.Revision)
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) || errors.Is(err, natsjs.ErrKeyExists) {
		return nil, fmt.Errorf("%w: partition %d taken meanwhile", ErrLeaseHeld, p)
	}
	if err != nil {
		return nil, fmt.Errorf("partition: acquire lease %d: %w", p, retry.Opaque(err))
	}
	l.rev, l.sentAt, l.info.Revision = rev, sent, rev
	return l, nil
}

// WaitFree blocks until partition p's lease is not held by another member (released,
// expired, or never taken) and returns how it ended, watching the key. ctx bounds the wait.
func (g *Group) WaitFree(ctx context.Context, p int) (LeaseState, error) {
	w, err := g.kv.Watch(ctx, LeaseKey(g.cfg.Topic, p))
	if err != nil {
		return 0, fmt.Errorf("partition: watch lease %d: %w", p, retry.Opaque(err))
	}
	defer func() { _ = w.Stop() }()
	state := LeaseFree
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return 0, fmt.Errorf("partition: watch lease %d: %w: the watch ended", p, jetbus.ErrUnavailable)
			}
			if e == nil {
				if state != LeaseHeld {
					return state, nil
				}
				continue
			}
			switch e.Operation() {
			case natsjs.KeyValueDelete:
				state = LeaseReleased
			case natsjs.KeyValuePurge:
				state = LeaseExpired
			default:
				var li LeaseInfo
				if json.Unmarshal(e.Value(), &li) == nil && li.Owner == g.cfg.MemberID {
					state = LeaseFree
				} else {
					state = LeaseHeld
				}
			}
			if state != LeaseHeld && e.Delta() == 0 {
				return state, nil
			}
		}
	}
}

// Partition returns the leased partition.
func (l *Lease) Partition() int { return l.p }

// Revision returns the revision of this member's last write of the lease.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// SentAt returns when the last successful write of the lease was sent: the server cannot
// expire the lease before SentAt + TTL.
func (l *Lease) SentAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sentAt
}

// landed returns the lease's revision when it is still this member's at a revision newer
// than l.rev: a renewal that timed out or was cancelled (its answer lost) may have landed.
// Only this member writes a lease it holds (others only take a free one), so a held lease
// with our owner and acquisition time is ours. l.mu is held.
func (l *Lease) landed(ctx context.Context) (uint64, bool) {
	cur, err := l.g.ReadLease(ctx, l.p)
	if err != nil || cur.State != LeaseHeld || cur.Owner != l.info.Owner || !cur.Acquired.Equal(l.info.Acquired) {
		return 0, false
	}
	return cur.Revision, true
}

// Renew rewrites the lease if this member still holds it (update with the last revision).
// It returns ErrLeaseLost when the lease was released, expired or taken since; the owner
// must stop the partition at once. Other errors (a timeout, a lost connection) leave the
// lease valid until SentAt + Timeouts().Guard, by when the owner stops unless a renewal
// succeeded.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return fmt.Errorf("%w: partition %d", ErrLeaseLost, l.p)
	}
	info := l.info
	info.Renewed = time.Now().UTC()
	b, _ := json.Marshal(info)
	sent := time.Now()
	rev, err := l.g.kv.Update(ctx, LeaseKey(l.g.cfg.Topic, l.p), b, l.rev)
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		if cur, ok := l.landed(ctx); ok {
			rev, err = l.g.kv.Update(ctx, LeaseKey(l.g.cfg.Topic, l.p), b, cur)
		}
	}
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) || errors.Is(err, natsjs.ErrKeyNotFound) {
		l.lost = true
		return fmt.Errorf("%w: partition %d: %v", ErrLeaseLost, l.p, err)
	}
	if err != nil {
		return fmt.Errorf("partition: renew lease %d: %w", l.p, retry.Opaque(err))
	}
	l.rev, l.sentAt, l.info = rev, sent, info
	return nil
}

// Keep renews l every Timeouts().Renew interval of its group until ctx is done, then returns
// nil. It returns an error wrapping ErrLeaseLost when the lease was lost, or when no renewal
// succeeded within Timeouts().Guard of the last one sent — before the server can expire it
// and let another member in: the holder must then stop what the lease guards at once.
//
// A renewal that fails otherwise (a timeout, a lost connection) is retried at the next
// interval; failed, when not nil, is called with its error while ctx is not done. Each
// renewal is given until the guard fires. Keep is the one renewal rule of every lease
// holder: Subscriber's partition owners and package changefeed's feeds and drainers.
func (l *Lease) Keep(ctx context.Context, failed func(error)) error {
	to := l.g.timeout
	guard := time.NewTimer(time.Until(l.SentAt().Add(to.Guard)))
	defer guard.Stop()
	renew := time.NewTicker(to.Renew)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-guard.C:
			return fmt.Errorf("%w: partition %d not renewed for %s", ErrLeaseLost, l.p, to.Guard)
		case <-renew.C:
			// A renewal is useful until the guard fires: give it that long.
			rctx, cancel := context.WithDeadline(ctx, l.SentAt().Add(to.Guard))
			err := l.Renew(rctx)
			cancel()
			switch {
			case err == nil:
				guard.Reset(time.Until(l.SentAt().Add(to.Guard)))
			case errors.Is(err, ErrLeaseLost):
				return err
			case ctx.Err() == nil && failed != nil:
				failed(err)
			}
		}
	}
}

// Release deletes the lease if this member still holds it (delete with the last revision),
// so the next owner starts at once. Call it only after the partition's subscription has
// stopped. It is idempotent.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return nil
	}
	err := l.g.kv.Delete(ctx, LeaseKey(l.g.cfg.Topic, l.p), natsjs.LastRevision(l.rev))
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		// The keeper's last renewal, cut off when its holder stopped, may have landed.
		if cur, ok := l.landed(ctx); ok {
			err = l.g.kv.Delete(ctx, LeaseKey(l.g.cfg.Topic, l.p), natsjs.LastRevision(cur))
		}
	}
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		l.lost = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("partition: release lease %d: %w", l.p, retry.Opaque(err))
	}
	l.lost = true
	return nil
}
