package partition_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// benchMember starts a member with its own connection and Bus; kill closes its connection.
type benchMember struct {
	sub  *partition.Subscriber
	kill func()
}

func startBenchMember(b *testing.B, url, topic, group, id string, ttl time.Duration, h jetbus.Handler, opts ...jetbus.SubscribeOption) *benchMember {
	b.Helper()
	bus := embeddedtest.Bus(b, url)
	nc := bus.Conn()
	sub, err := partition.Subscribe(b.Context(), bus, bus.JetStream(), partition.Config{Topic: topic, Group: group, MemberID: id, TTL: ttl, Logger: embeddedtest.Logger(b)}, h, opts...)
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Stop() })
	return &benchMember{sub: sub, kill: nc.Close}
}

// waitConverged polls the group's status until want members own every partition under
// their lease, and returns how long that took.
func waitConverged(b *testing.B, js natsjs.JetStream, topic, group string, want int, start time.Time) time.Duration {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := partition.Status(ctx, js, topic, group)
		cancel()
		if err == nil && len(st.Members) == want && len(st.Assignment.Members) == want && st.Balanced() {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("group %s did not converge to %d members within 30s", group, want)
	return 0
}

func noop(context.Context, *jetbus.Delivery) error { return nil }

// BenchmarkRebalance measures, with the default TTL, how long a group of 16 partitions takes
// to converge (every partition leased by its new owner) after a graceful join, a graceful
// leave, and a killed member (connection closed: no leave, no release).
func BenchmarkRebalance(b *testing.B) {
	s := embeddedtest.NATS(b)
	admin := embeddedtest.Bus(b, s.ClientURL())
	ctx := b.Context()
	require.NoError(b, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 16}))
	js := admin.JetStream()
	ttl := partition.DefaultTTL

	var join, leave, killed time.Duration
	for i := range b.N {
		group := "g" + strconv.Itoa(i)
		startBenchMember(b, s.ClientURL(), "orders", group, "a", ttl, noop)
		startBenchMember(b, s.ClientURL(), "orders", group, "b", ttl, noop)
		waitConverged(b, js, "orders", group, 2, time.Now())

		t0 := time.Now()
		c := startBenchMember(b, s.ClientURL(), "orders", group, "c", ttl, noop)
		join += waitConverged(b, js, "orders", group, 3, t0)

		t0 = time.Now()
		require.NoError(b, c.sub.Stop())
		leave += waitConverged(b, js, "orders", group, 2, t0)

		d := startBenchMember(b, s.ClientURL(), "orders", group, "d", ttl, noop)
		waitConverged(b, js, "orders", group, 3, time.Now())
		t0 = time.Now()
		d.kill()
		killed += waitConverged(b, js, "orders", group, 2, t0)
	}
	b.ReportMetric(float64(join.Milliseconds())/float64(b.N), "join-ms")
	b.ReportMetric(float64(leave.Milliseconds())/float64(b.N), "leave-ms")
	b.ReportMetric(float64(killed.Milliseconds())/float64(b.N), "killed-ms")
	b.ReportMetric(float64(ttl.Milliseconds()), "ttl-ms")
}

// BenchmarkConsume compares, in the same run and on the same server, consuming a 16-partition
// topic through one partitioned member with consuming it through raw nats.go pull consumers
// (one durable per partition, Messages iterator, Ack), and reports both rates and their ratio.
// Each rate is measured from the first delivery to the last, so set-up (consumers, joining,
// leases) is left out of both.
func BenchmarkConsume(b *testing.B) {
	const events = 50_000
	s := embeddedtest.NATS(b)
	admin := embeddedtest.Bus(b, s.ClientURL())
	ctx := b.Context()
	require.NoError(b, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 16}))
	futs := make([]jetbus.PublishFuture, 0, events)
	for i := range events {
		f, err := admin.PublishAsync(ctx, "orders", map[string]int{"n": i}, jetbus.WithKey("k"+strconv.Itoa(i%1000)))
		require.NoError(b, err)
		futs = append(futs, f)
	}
	for _, f := range futs {
		_, err := f.Wait(ctx)
		require.NoError(b, err)
	}
	js := admin.JetStream()

	var rawTotal, busTotal, partTotal time.Duration
	b.ResetTimer()
	for i := range b.N {
		rawTotal += consumeRaw(b, js, "raw"+strconv.Itoa(i), events)
		busTotal += consumeBus(b, s.ClientURL(), "bus"+strconv.Itoa(i), events)
		partTotal += consumePartitioned(b, s.ClientURL(), "part"+strconv.Itoa(i), events)
	}
	b.StopTimer()
	rawRate := float64(events*b.N) / rawTotal.Seconds()
	busRate := float64(events*b.N) / busTotal.Seconds()
	partRate := float64(events*b.N) / partTotal.Seconds()
	b.ReportMetric(rawRate, "raw-ev/s")
	b.ReportMetric(busRate, "bus-ev/s")
	b.ReportMetric(partRate, "partitioned-ev/s")
	b.ReportMetric(partRate/rawRate, "ratio")
	b.ReportMetric(partRate/busRate, "ratio-to-bus")
}

// consumeBus consumes through one plain Bus subscription of every partition: what the
// partitioned subscriber costs on top of the Bus.
func consumeBus(b *testing.B, url, group string, events int) time.Duration {
	b.Helper()
	bus := embeddedtest.Bus(b, url)
	var n atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var first atomic.Pointer[time.Time]
	sub, err := bus.Subscribe(b.Context(), "orders", group, func(context.Context, *jetbus.Delivery) error {
		now := time.Now()
		first.CompareAndSwap(nil, &now)
		if n.Add(1) == int64(events) {
			once.Do(func() { close(done) })
		}
		return nil
	}, jetbus.FromEarliest())
	require.NoError(b, err)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("bus: consumed %d of %d", n.Load(), events)
	}
	d := time.Since(*first.Load())
	require.NoError(b, sub.Stop())
	return d
}

func consumeRaw(b *testing.B, js natsjs.JetStream, group string, events int) time.Duration {
	b.Helper()
	ctx := b.Context()
	var n atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	conss := make([]natsjs.Consumer, 16)
	for p := range 16 {
		cons, err := js.CreateOrUpdateConsumer(ctx, jetbus.StreamName("orders"), natsjs.ConsumerConfig{
			Durable:       fmt.Sprintf("%s_p%d", group, p),
			FilterSubject: jetbus.PartitionSubject("orders", p),
			AckPolicy:     natsjs.AckExplicitPolicy,
			DeliverPolicy: natsjs.DeliverAllPolicy,
			AckWait:       jetbus.DefaultAckTimeout,
			MaxAckPending: jetbus.DefaultMaxInFlight,
		})
		require.NoError(b, err)
		conss[p] = cons
	}
	var first atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for _, cons := range conss {
		it, err := cons.Messages(natsjs.PullMaxMessages(jetbus.DefaultBatchSize))
		require.NoError(b, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := it.Next()
				if err != nil {
					return
				}
				_ = msg.Ack()
				now := time.Now()
				first.CompareAndSwap(nil, &now)
				if n.Add(1) == int64(events) {
					once.Do(func() { close(done) })
				}
			}
		}()
		defer it.Stop()
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("raw: consumed %d of %d", n.Load(), events)
	}
	return time.Since(*first.Load())
}

func consumePartitioned(b *testing.B, url, group string, events int) time.Duration {
	b.Helper()
	var n atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var first atomic.Pointer[time.Time]
	m := startBenchMember(b, url, "orders", group, "only", partition.DefaultTTL, func(context.Context, *jetbus.Delivery) error {
		now := time.Now()
		first.CompareAndSwap(nil, &now)
		if n.Add(1) == int64(events) {
			once.Do(func() { close(done) })
		}
		return nil
	}, jetbus.FromEarliest())
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("partitioned: consumed %d of %d", n.Load(), events)
	}
	d := time.Since(*first.Load())
	require.NoError(b, m.sub.Stop())
	return d
}
