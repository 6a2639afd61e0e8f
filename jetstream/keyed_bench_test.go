package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// BenchmarkKeyedPublish compares async publish throughput to a keyed topic (one subject per
// key) with a plain one (one subject per partition), 16 partitions each, in alternating
// rounds, with a fresh key per event (the worst case for the server's per-subject state).
func BenchmarkKeyedPublish(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	require.NoError(b, e.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "bench.keyed", Partitions: 16, Keyed: true, KeepPerKey: 1}))
	require.NoError(b, e.bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "bench.plain", Partitions: 16}))
	k := 0
	run := func(topic string) func(n int) time.Duration {
		return func(n int) time.Duration {
			t0 := time.Now()
			for range n {
				k++
				if _, err := e.bus.PublishAsync(ctx, topic, benchPayload, jetbus.WithKey("key-"+strconv.Itoa(k))); err != nil {
					b.Fatal(err)
				}
			}
			<-e.bus.PublishAsyncComplete()
			return time.Since(t0)
		}
	}
	// "raw" is the plain topic here, "bus" the keyed one.
	ab(b, run("bench.plain"), run("bench.keyed"), false)
}

// BenchmarkKeyedReads fills a 16-partition keyed topic with JETBUS_BENCH_KEYS keys (default
// 1M, one event each) and a plain topic with as many events, then reports the latency of
// Latest for 1 and 100 keys and of At (p50, p99 over 1000 calls each), Fold on the plain
// topic, and the server's memory per key. It runs once whatever b.N.
func BenchmarkKeyedReads(b *testing.B) {
	keys := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("JETBUS_BENCH_KEYS")); err == nil && v > 0 {
		keys = v
	}
	s := embeddedtest.NATS(b)
	bus := embeddedtest.Bus(b, s.ClientURL())
	ctx := context.Background()
	require.NoError(b, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "reads.keyed", Partitions: 16, Keyed: true, KeepPerKey: 1}))
	require.NoError(b, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "reads.plain", Partitions: 16}))

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	fill := func(topic string, key func(i int) string) {
		for i := range keys {
			for {
				_, err := bus.PublishAsync(ctx, topic, benchPayload, jetbus.WithKey(key(i)))
				if err == nil {
					break
				}
				<-bus.PublishAsyncComplete()
			}
		}
		<-bus.PublishAsyncComplete()
	}
	before := heap()
	fill("reads.keyed", func(i int) string { return "key-" + strconv.Itoa(i) })
	perKey := float64(heap()-before) / float64(keys)
	fill("reads.plain", func(i int) string { return "key-" + strconv.Itoa(i%1000) })

	lat := func(calls int, f func(i int)) (p50, p99 float64) {
		d := make([]float64, calls)
		for i := range calls {
			t0 := time.Now()
			f(i)
			d[i] = float64(time.Since(t0).Microseconds()) / 1000
		}
		slices.Sort(d)
		return d[calls/2], d[calls*99/100]
	}
	key := func(i int) string { return "key-" + strconv.Itoa((i*7919)%keys) }
	l1p50, l1p99 := lat(1000, func(i int) {
		got, err := bus.Latest(ctx, "reads.keyed", key(i))
		if err != nil || len(got) != 1 {
			b.Fatalf("Latest: %v, %d found", err, len(got))
		}
	})
	hundred := make([]string, 100)
	l100p50, l100p99 := lat(200, func(i int) {
		for j := range hundred {
			hundred[j] = key(i*100 + j)
		}
		got, err := bus.Latest(ctx, "reads.keyed", hundred...)
		if err != nil || len(got) != len(hundred) {
			b.Fatalf("Latest(100): %v, %d found", err, len(got))
		}
	})
	now := time.Now()
	atp50, atp99 := lat(1000, func(i int) {
		if _, err := bus.At(ctx, "reads.keyed", key(i), now); err != nil {
			b.Fatalf("At: %v", err)
		}
	})
	foldp50, _ := lat(5, func(i int) {
		count := 0
		err := bus.Fold(ctx, "reads.plain", "key-"+strconv.Itoa(i), time.Time{}, func(*jetbus.Event) error { count++; return nil })
		if err != nil || count != keys/1000 {
			b.Fatalf("Fold: %v, %d events", err, count)
		}
	})
	b.ReportMetric(float64(keys), "keys")
	b.ReportMetric(perKey, "server-bytes/key")
	b.ReportMetric(l1p50, "latest1-p50-ms")
	b.ReportMetric(l1p99, "latest1-p99-ms")
	b.ReportMetric(l100p50, "latest100-p50-ms")
	b.ReportMetric(l100p99, "latest100-p99-ms")
	b.ReportMetric(atp50, "at-p50-ms")
	b.ReportMetric(atp99, "at-p99-ms")
	b.ReportMetric(foldp50, "fold-plain-ms")
	b.ReportMetric(0, "ns/op")
	fmt.Fprintf(os.Stderr, "keyed reads: %d keys, %.0f server bytes/key\n", keys, perKey)
}
