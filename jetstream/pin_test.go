package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

type seqRecorder struct {
	mu   sync.Mutex
	seqs []uint64
}

func (r *seqRecorder) handler(_ context.Context, d *jetbus.Delivery) error {
	r.mu.Lock()
	r.seqs = append(r.seqs, d.Seq)
	r.mu.Unlock()
	return nil
}

func (r *seqRecorder) len() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.seqs) }

// Two clients subscribing the same group never consume a partition at once: the second waits
// until the first stops, then continues where it left off without waiting for the pin TTL.
func TestOneClientPerPartition(t *testing.T) {
	s := embeddedtest.NATS(t)
	a := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPinnedTTL(time.Minute))
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPinnedTTL(time.Minute))
	ctx := context.Background()
	require.NoError(t, a.EnsureTopic(ctx, jbjs.TopicConfig{Name: "pin"}))
	ra, rb := &seqRecorder{}, &seqRecorder{}
	subA, err := a.Subscribe(ctx, "pin", "g", ra.handler, jetbus.FromEarliest())
	require.NoError(t, err)
	for i := range 20 {
		_, err := a.Publish(ctx, "pin", i)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return ra.len() == 20 }, 10*time.Second, 10*time.Millisecond)
	subB, err := b.Subscribe(ctx, "pin", "g", rb.handler)
	require.NoError(t, err)
	defer subB.Stop()
	for i := range 20 {
		_, err := a.Publish(ctx, "pin", i)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return ra.len() == 40 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 0, rb.len(), "the second client gets nothing while the first holds the partition")
	require.NoError(t, subA.Stop())
	for i := range 10 {
		_, err := a.Publish(ctx, "pin", i)
		require.NoError(t, err)
	}
	// Well within the one-minute pin TTL.
	require.Eventually(t, func() bool { return rb.len() == 10 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, uint64(41), rb.seqs[0])
}

// SubscribePartition takes a partition from a client that died without stopping, and gets the events the
// dead client had fetched but not acknowledged first, in order, without waiting for the ack
// timeout.
func TestTakeOverFromCrashedClient(t *testing.T) {
	s := embeddedtest.NATS(t)
	ctx := context.Background()
	admin := embeddedtest.Bus(t, s.ClientURL())
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "crash"}))
	for i := range 30 {
		_, err := admin.Publish(ctx, "crash", i, jetbus.WithKey("k"))
		require.NoError(t, err)
	}
	deadNC := embeddedtest.Connect(t, s.ClientURL())
	dead, err := jbjs.Open(ctx, deadNC, jbjs.WithPinnedTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan uint64, 100)
	block := make(chan struct{})
	defer close(block)
	_, err = dead.Subscribe(ctx, "crash", "g", func(_ context.Context, d *jetbus.Delivery) error {
		if d.Seq > 5 {
			got <- d.Seq
			<-block // hangs, as a stuck process would
		}
		return nil
	}, jetbus.FromEarliest(), jetbus.AckTimeout(time.Minute), jetbus.BatchSize(10))
	require.NoError(t, err)
	require.Equal(t, uint64(6), <-got)
	deadNC.Close() // the process dies: no stop, no unpin, no acks

	r := &seqRecorder{}
	next := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPinnedTTL(time.Minute))
	sub, err := next.SubscribePartition(ctx, "crash", "g", 0, r.handler, jetbus.AckTimeout(time.Minute))
	require.NoError(t, err)
	defer sub.Stop()
	require.Eventually(t, func() bool { return r.len() == 25 }, 10*time.Second, 10*time.Millisecond,
		"events 6..30 within the ack timeout and the pin TTL")
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, seq := range r.seqs {
		assert.Equal(t, uint64(6+i), seq, fmt.Sprintf("delivery %d in order", i))
	}
}

// A consumer deleted before its take-over succeeds is recreated: the take-over's retries look
// the consumer up again rather than ask for the deleted one forever. (The server refuses the
// take-over's unpin until the consumer is gone, so the take-over cannot succeed first.)
func TestTakeOverRecreatesDeletedConsumer(t *testing.T) {
	dir := t.TempDir()
	options := func(port int, denyUnpin bool) *server.Options {
		opts := embeddedtest.ServerOptions(dir)
		opts.Port = port
		bus := &server.User{Username: "bus", Password: "bus-secret"}
		if denyUnpin {
			bus.Permissions = &server.Permissions{Publish: &server.SubjectPermission{
				Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.UNPIN.>"},
			}}
		}
		opts.Users = []*server.User{bus, {Username: "admin", Password: "admin-secret"}}
		return opts
	}
	s, err := embeddedtest.StartServer(options(server.RANDOM_PORT, true))
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	port := s.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	admin := embeddedtest.Bus(t, fmt.Sprintf("nats://admin:admin-secret@127.0.0.1:%d", port))
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "gone"}))

	r := &seqRecorder{}
	b := embeddedtest.Bus(t, fmt.Sprintf("nats://bus:bus-secret@127.0.0.1:%d", port))
	sub, err := b.SubscribePartition(ctx, "gone", "g", 0, r.handler, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	require.NoError(t, admin.JetStream().DeleteConsumer(ctx, jetbus.StreamName("gone"), jetbus.ConsumerName("g", 0)))
	require.NoError(t, s.ReloadOptions(options(port, false)))

	_, err = admin.Publish(ctx, "gone", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.len() == 1 }, 20*time.Second, 10*time.Millisecond,
		"the consumer is recreated and the event delivered")
}
