package partition_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
)

func TestLeaseLifecycle(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	const ttl = time.Second
	open := func(id string) *partition.Group {
		g, err := partition.OpenGroup(ctx, jetStream(t, s.ClientURL()), partition.Config{Topic: "orders", Group: "g", MemberID: id, TTL: ttl})
		require.NoError(t, err)
		return g
	}
	a, b := open("a"), open("b")

	st, err := a.WaitFree(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseFree, st, "never taken")

	la, err := a.TryAcquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseFree, la.Previous)
	_, err = b.TryAcquire(ctx, 3)
	require.ErrorIs(t, err, partition.ErrLeaseHeld)
	info, err := b.ReadLease(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseHeld, info.State)
	assert.Equal(t, "a", info.Owner)

	rev := la.Revision()
	require.NoError(t, la.Renew(ctx))
	assert.Greater(t, la.Revision(), rev)

	// Graceful handoff: b waits on the key and sees the release.
	freed := make(chan partition.LeaseState, 1)
	go func() {
		st, err := b.WaitFree(ctx, 3)
		assert.NoError(t, err)
		freed <- st
	}()
	require.NoError(t, la.Release(ctx))
	select {
	case st := <-freed:
		assert.Equal(t, partition.LeaseReleased, st)
	case <-time.After(2 * time.Second):
		t.Fatal("release not seen")
	}
	require.ErrorIs(t, la.Renew(ctx), partition.ErrLeaseLost, "renew after release")

	lb, err := b.TryAcquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseReleased, lb.Previous)

	// b stops renewing: its lease expires, a sees the expiry and takes over.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, ttl+3*time.Second)
	defer cancel()
	st, err = a.WaitFree(wctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseExpired, st)
	t.Logf("unrenewed lease expired after %s (TTL %s)", time.Since(start), ttl)
	la2, err := a.TryAcquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseExpired, la2.Previous)

	// The old owner's renewal now fails: it must stop.
	require.ErrorIs(t, lb.Renew(ctx), partition.ErrLeaseLost)
	require.NoError(t, lb.Release(ctx), "release of a lost lease is a no-op")
	info, err = b.ReadLease(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, "a", info.Owner, "a stale release must not delete the new owner's lease")

	_, err = a.TryAcquire(ctx, -1)
	assert.ErrorIs(t, err, partition.ErrInvalidConfig)
}

func TestLeaseRace(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	const members = 5
	groups := make([]*partition.Group, members)
	for i := range groups {
		g, err := partition.OpenGroup(ctx, jetStream(t, s.ClientURL()), partition.Config{Topic: "orders", Group: "g", MemberID: string(rune('a' + i)), TTL: time.Second})
		require.NoError(t, err)
		groups[i] = g
	}
	for p := range 20 {
		won := make(chan bool, members)
		for _, g := range groups {
			go func() {
				_, err := g.TryAcquire(ctx, p)
				won <- err == nil
			}()
		}
		n := 0
		for range members {
			if <-won {
				n++
			}
		}
		require.Equal(t, 1, n, "partition %d: %d members acquired the lease at once", p, n)
	}
}

// TestAdvanceCompareAndSet checks that two members advancing the stored assignment from the
// same revision cannot both win, and that the stored view revision only grows.
func TestAdvanceCompareAndSet(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	open := func(id string) *partition.Group {
		g, err := partition.OpenGroup(ctx, jetStream(t, s.ClientURL()), partition.Config{Topic: "orders", Group: "g", MemberID: id, TTL: time.Second})
		require.NoError(t, err)
		return g
	}
	a, b := open("a"), open("b")
	prev, err := a.Assignment(ctx)
	require.NoError(t, err)
	assert.Zero(t, prev.Revision)

	first, err := a.Advance(ctx, prev, []string{"a"}, 4, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "a", "a", "a"}, first.Owners)
	_, err = b.Advance(ctx, prev, []string{"a", "b"}, 4, 11)
	require.ErrorIs(t, err, partition.ErrAssignmentConflict, "a stale compare-and-set must fail")

	cur, err := b.Assignment(ctx)
	require.NoError(t, err)
	assert.Equal(t, first.Owners, cur.Owners)
	assert.Equal(t, uint64(10), cur.AsOf)
	next, err := b.Advance(ctx, cur, []string{"a", "b"}, 4, 5)
	require.NoError(t, err)
	assert.Equal(t, uint64(10), next.AsOf, "as_of never goes back")
	assert.Len(t, partition.Owned(next.Owners, "b"), 2)
	same, err := a.Advance(ctx, next, []string{"b", "a", "a"}, 4, 20)
	require.NoError(t, err)
	assert.Equal(t, next.Revision, same.Revision, "nothing to store when the members match")
}

// TestLeaseKeep: Keep holds a lease past its TTL by renewing it, returns nil when its context
// ends, and returns ErrLeaseLost at its next renewal once the lease was taken from it.
func TestLeaseKeep(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	js := jetStream(t, s.ClientURL())
	g, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "keep", MemberID: "a", TTL: time.Second})
	require.NoError(t, err)
	l, err := g.TryAcquire(ctx, 0)
	require.NoError(t, err)
	rev := l.Revision()

	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Keep(kctx, nil) }()
	time.Sleep(1500 * time.Millisecond) // past the lease TTL
	info, err := g.ReadLease(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseHeld, info.State, "kept past its TTL")
	assert.Equal(t, "a", info.Owner)
	assert.Greater(t, l.Revision(), rev, "renewed")
	stop()
	require.NoError(t, <-done, "a context that ends is not a loss")

	// Taken behind its back: the key deleted, then another member's.
	kv, err := js.KeyValue(ctx, partition.GroupBucket("keep"))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, partition.LeaseKey("orders", 0)))
	var failed []error
	go func() { done <- l.Keep(ctx, func(err error) { failed = append(failed, err) }) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, partition.ErrLeaseLost)
	case <-time.After(2 * time.Second):
		t.Fatal("the loss was not seen")
	}
	assert.Empty(t, failed, "a loss is returned, not reported as a failed renewal")
}

// TestReleaseAfterALandedRenewal: a renewal whose answer was lost (cut off when its holder
// stopped) may have landed; the release that follows still deletes the lease, so the next
// owner need not wait for it to expire. A lease another member took since is left alone.
func TestReleaseAfterALandedRenewal(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := t.Context()
	js := jetStream(t, s.ClientURL())
	kv := func() natsjs.KeyValue {
		_, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "landed", MemberID: "x", TTL: time.Minute})
		require.NoError(t, err)
		kv, err := js.KeyValue(ctx, partition.GroupBucket("landed"))
		require.NoError(t, err)
		return kv
	}()
	key := partition.LeaseKey("orders", 0)
	// landed writes what l's renewal would have, without l seeing the answer.
	landed := func() {
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		_, err = kv.Update(ctx, key, e.Value(), e.Revision())
		require.NoError(t, err)
	}

	a, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "landed", MemberID: "a", TTL: time.Minute})
	require.NoError(t, err)
	l, err := a.TryAcquire(ctx, 0)
	require.NoError(t, err)
	landed()
	require.NoError(t, l.Release(ctx))
	info, err := a.ReadLease(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseReleased, info.State, "released after a renewal landed unseen: %+v", info)

	// Taken by b since: a's release (with a landed renewal of its own before) leaves b's lease.
	l, err = a.TryAcquire(ctx, 0)
	require.NoError(t, err)
	landed()
	require.NoError(t, kv.Delete(ctx, key))
	b, err := partition.OpenGroup(ctx, js, partition.Config{Topic: "orders", Group: "landed", MemberID: "b", TTL: time.Minute})
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	info, err = a.ReadLease(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, partition.LeaseHeld, info.State)
	assert.Equal(t, "b", info.Owner)
}
