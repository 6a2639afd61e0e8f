package changefeed

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/partition"
)

// leaseHolder takes and keeps the one lease of a feed or drainer. The lease is package
// partition's (create with a compare-and-set, renew with an update on the revision, release
// with a delete on the revision, expiry by the bucket's MaxAge): a feed is a group of one
// partition, "changefeed_<name>" (a drainer "outbox_<name>"), in its own bucket
// jetbus_group_changefeed_<name>, lease key l.changefeed.p0.
type leaseHolder struct {
	g  *partition.Group
	to partition.Timeouts
}

func openLease(ctx context.Context, js natsjs.JetStream, kind, name, member string, ttl time.Duration, replicas int) (*leaseHolder, error) {
	g, err := partition.OpenGroup(ctx, js, partition.Config{Topic: kind, Group: kind + "_" + name, MemberID: member, TTL: ttl, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	return &leaseHolder{g: g, to: g.Config().Timeouts()}, nil
}

// member returns this runner's ID in the lease.
func (h *leaseHolder) member() string { return h.g.Config().MemberID }

// acquire blocks until this runner holds the lease — a hot standby meanwhile, watching the
// lease key, calling standby with the holder's ID each time it finds it held — or ctx ends.
func (h *leaseHolder) acquire(ctx context.Context, standby func(owner string)) (*partition.Lease, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, h.to.LeaseTTL)
		l, err := h.g.TryAcquire(actx, 0)
		cancel()
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, partition.ErrLeaseHeld) {
			return nil, err
		}
		owner := ""
		if info, rerr := h.g.ReadLease(ctx, 0); rerr == nil {
			owner = info.Owner
		}
		standby(owner)
		// Wait for the release or the expiry; look again after two TTLs in case a marker
		// was missed.
		wctx, cancel := context.WithTimeout(ctx, 2*h.to.LeaseTTL)
		_, _ = h.g.WaitFree(wctx, 0)
		cancel()
	}
}

// release deletes the lease so a standby takes over at once.
func (h *leaseHolder) release(l *partition.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.to.LeaseTTL)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("changefeed: release lease: %w", retry.Opaque(err))
	}
	return nil
}
