package main

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
)

// TestMain: the test binary, re-executed by embeddedtest.ChildCommand, is the projector.
func TestMain(m *testing.M) { embeddedtest.TestMain(m, main) }

// startProjector starts `projector args…` as a process.
func startProjector(t *testing.T, args ...string) *embeddedtest.Process {
	t.Helper()
	return embeddedtest.Start(t, "projector", embeddedtest.ChildCommand(args...))
}

// TestSIGTERMReleasesLeases: two `projector run` processes share a projection's partitions;
// SIGTERM to one makes it write and acknowledge what it holds, release its leases and exit 0,
// and the other owns every partition well before the lease TTL would have passed. The view
// then holds every event.
func TestSIGTERMReleasesLeases(t *testing.T) {
	d := newDeployment(t)
	a := startProjector(t, "run", "--config", d.config, "--http-addr", freeAddr(t))
	b := startProjector(t, "run", "--config", d.config, "--http-addr", freeAddr(t))
	js := d.bus.JetStream()
	status := func() *partition.GroupStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := partition.Status(ctx, js, "orders", "orders-view")
		if err != nil {
			return nil
		}
		return st
	}
	require.Eventually(t, func() bool {
		st := status()
		return st != nil && len(st.Members) == 2 && st.Balanced()
	}, 60*time.Second, 20*time.Millisecond, "the two projectors share the partitions")
	d.publish(t, 100)

	// Watch the leases: a released lease is deleted (KeyValueDelete); an expired one would
	// show as another removal.
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	kv, err := js.KeyValue(wctx, partition.GroupBucket("orders-view"))
	require.NoError(t, err)
	w, err := kv.Watch(wctx, "l.orders.*", natsjs.UpdatesOnly())
	require.NoError(t, err)
	var mu sync.Mutex
	var removals []natsjs.KeyValueOp
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Operation() != natsjs.KeyValuePut {
				mu.Lock()
				removals = append(removals, e.Operation())
				mu.Unlock()
			}
		}
	}()

	t0 := time.Now()
	code, _ := a.Stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, code, "SIGTERM: exit status 0")
	require.Eventually(t, func() bool {
		st := status()
		return st != nil && len(st.Members) == 1 && st.Balanced()
	}, partition.DefaultTTL, 10*time.Millisecond, "the other projector takes every partition")
	took := time.Since(t0)
	t.Logf("SIGTERM to every partition owned by the other projector: %s (lease TTL %s)", took, partition.DefaultTTL)
	assert.Less(t, took, partition.DefaultTTL, "well before the lease TTL")
	mu.Lock()
	assert.NotEmpty(t, removals, "the stopped projector's leases were removed")
	for _, op := range removals {
		assert.Equal(t, natsjs.KeyValueDelete, op, "a lease released, not expired")
	}
	mu.Unlock()
	require.NoError(t, w.Stop())

	d.publish(t, 100)
	require.Eventually(t, func() bool {
		c, err := d.bus.Cursor(context.Background(), "orders", "orders-view")
		return err == nil && c.Lag() == 0
	}, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(10), d.count(t, "orders"))
	code, _ = b.Stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, code)
}
