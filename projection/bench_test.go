package projection_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
)

// Benchmark shape: 16 partitions, 100k events over 10k keys. The projection runs with its
// default configuration (what users run); the raw pipeline fetches and writes batches of
// benchRawBatch.
const (
	benchEvents     = 100_000
	benchKeys       = 10_000
	benchPartitions = 16
	benchRawBatch   = 500
)

// benchEnv is the stream every side of BenchmarkChangelog reads, and the database they write.
type benchEnv struct {
	url string
	bus *jetstream.Bus
	q   *dlq.Queue
	db  *mongo.Database
}

func newBenchEnv(b *testing.B) *benchEnv {
	s := embeddedtest.NATS(b)
	be := &benchEnv{url: s.ClientURL(), bus: embeddedtest.Bus(b, s.ClientURL()), db: embeddedtest.Mongo(b)}
	ctx := b.Context()
	require.NoError(b, be.bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders", Partitions: benchPartitions}))
	q, err := dlq.Open(ctx, be.bus.JetStream(), dlq.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = q.Close() })
	be.q = q
	futs := make([]jetbus.PublishFuture, 0, 1000)
	for i := range benchEvents {
		payload := map[string]any{"n": i, "status": []string{"new", "paid", "shipped"}[i%3], "amount": i % 977, "note": "benchmark order"}
		f, err := be.bus.PublishAsync(ctx, "orders", payload, jetbus.WithKey("k"+strconv.Itoa(i%benchKeys)))
		require.NoError(b, err)
		futs = append(futs, f)
		if len(futs) == cap(futs) || i == benchEvents-1 {
			for _, f := range futs {
				_, err := f.Wait(ctx)
				require.NoError(b, err)
			}
			futs = futs[:0]
		}
	}
	return be
}

func (be *benchEnv) caughtUp(b *testing.B, group string) {
	require.Eventually(b, func() bool {
		c, err := be.bus.Cursor(context.Background(), "orders", group)
		return err == nil && len(c.Partitions) == benchPartitions && c.Lag() == 0
	}, 10*time.Minute, 10*time.Millisecond, "group %s did not catch up", group)
}

func (be *benchEnv) config(name string) projection.Config {
	return projection.Config{Name: name, Topic: "orders", Database: be.db.Name(), Collection: name}
}

// benchRound counts BenchmarkChangelog's iterations in this process.
var benchRound int

// BenchmarkChangelog compares, in one run on the same servers and the same stream, a
// changelog projection with the seeds' way (one upsert UpdateOne per event, acknowledged
// after it) and with raw nats.go + driver code doing the same work by hand (16 pull
// consumers fetching benchRawBatch (500), each batch coalesced per key into ONE unordered BulkWrite of
// ReplaceOne upserts, then acknowledged: no version guard, no dead letters, no checkpoint);
// the sides alternate and rotate which goes first. Each side is timed from its start until
// its group's lag is zero, and writes its own collection. The transactional projection has a
// benchmark of its own (BenchmarkTransactional): run between these sides, its aborted
// transactions slowed whichever side came next.
func BenchmarkChangelog(b *testing.B) {
	be := newBenchEnv(b)
	sides := []struct {
		name string
		run  func(b *testing.B, be *benchEnv, group string) int
	}{
		{"projection", benchProjection},
		{"seeds", benchSeeds},
		{"raw", benchRaw},
	}
	total := make([]time.Duration, len(sides))
	events := make([]int, len(sides))
	b.ResetTimer()
	for range b.N {
		// Which side goes first rotates across iterations and across -count runs.
		i := benchRound
		benchRound++
		for j := range sides {
			k := (i + j) % len(sides)
			group := fmt.Sprintf("%s-%d", sides[k].name, i)
			t0 := time.Now()
			n := sides[k].run(b, be, group)
			took := time.Since(t0)
			total[k] += took
			events[k] += n
			b.Logf("round %d: %s %d events in %s (%.0f ev/s)", i, sides[k].name, n, took.Round(time.Millisecond), float64(n)/took.Seconds())
		}
	}
	b.StopTimer()
	rate := make([]float64, len(sides))
	for k, s := range sides {
		rate[k] = float64(events[k]) / total[k].Seconds()
		b.ReportMetric(rate[k], s.name+"-ev/s")
	}
	b.ReportMetric(rate[0]/rate[1], "x-seeds")
	b.ReportMetric(rate[0]/rate[2], "x-raw")
}

func benchProjection(b *testing.B, be *benchEnv, group string) int {
	c, err := projection.NewChangelog(be.bus, be.db.Client(), be.q, be.config(group))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	be.caughtUp(b, group)
	cancel()
	require.NoError(b, <-done)
	return benchEvents
}

// BenchmarkTransactional reports a transactional projection's rate (one upsert per event in
// the batch's transaction, with the conditional checkpoint) over the same stream.
func BenchmarkTransactional(b *testing.B) {
	be := newBenchEnv(b)
	n, took := 0, time.Duration(0)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		n += benchTransactional(b, be, fmt.Sprintf("tx-%d", i))
		took += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/took.Seconds(), "tx-ev/s")
}

// benchTxWindow bounds the transactional side: it runs this long and reports the events it
// committed (on the MongoDB test backend a transaction is far slower than a bulk write).
const benchTxWindow = 20 * time.Second

// benchTransactional runs a transactional projection for benchTxWindow (or until it caught
// up) and returns the events it committed: 100k minus what its group has not delivered or
// acknowledged.
func benchTransactional(b *testing.B, be *benchEnv, group string) int {
	coll := be.db.Collection(group)
	h := func(ctx context.Context, d *jetbus.Delivery) error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.Key}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "_v", Value: int64(d.Seq)}, {Key: "payload", Value: string(d.Payload)}}}},
			options.UpdateOne().SetUpsert(true))
		return err
	}
	c, err := projection.NewTransactional(be.bus, be.db.Client(), be.q, h, be.config(group))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	settled := func() int {
		cur, err := be.bus.Cursor(context.Background(), "orders", group)
		if err != nil || len(cur.Partitions) < benchPartitions {
			return 0
		}
		left := 0
		for _, p := range cur.Partitions {
			left += int(p.Pending) + p.AckPending
		}
		return benchEvents - left
	}
	deadline := time.Now().Add(benchTxWindow)
	for time.Now().Before(deadline) && settled() < benchEvents {
		time.Sleep(20 * time.Millisecond)
	}
	n := settled()
	cancel()
	require.NoError(b, <-done)
	return n
}

// benchSeeds is the seeds' ChangelogProjector: a plain subscription whose handler upserts
// the payload's fields into the key's document, one UpdateOne per event.
func benchSeeds(b *testing.B, be *benchEnv, group string) int {
	coll := be.db.Collection(group)
	sub, err := be.bus.Subscribe(context.Background(), "orders", group, func(ctx context.Context, d *jetbus.Delivery) error {
		var set bson.D
		if err := bson.UnmarshalExtJSON(d.Payload, false, &set); err != nil {
			return jetbus.Permanent(err)
		}
		set = append(set, bson.E{Key: "_v", Value: int64(d.Seq)}, bson.E{Key: "_ts", Value: d.TS}, bson.E{Key: "_topic", Value: d.Topic})
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.Key}}, bson.D{{Key: "$set", Value: set}}, options.UpdateOne().SetUpsert(true))
		return err
	}, jetbus.From(jetbus.Earliest()))
	require.NoError(b, err)
	be.caughtUp(b, group)
	require.NoError(b, sub.Stop())
	return benchEvents
}

// benchRaw is what a careful user writes by hand with nats.go and the driver.
func benchRaw(b *testing.B, be *benchEnv, group string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coll := be.db.Collection(group)
	js := be.bus.JetStream()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchPartitions)
	for p := range benchPartitions {
		cons, err := js.CreateOrUpdateConsumer(ctx, jetbus.StreamName("orders"), natsjs.ConsumerConfig{
			Durable:       jetbus.ConsumerName(group, p),
			FilterSubject: jetbus.PartitionSubject("orders", p),
			AckPolicy:     natsjs.AckExplicitPolicy,
			DeliverPolicy: natsjs.DeliverAllPolicy,
			AckWait:       jetbus.DefaultAckTimeout,
			MaxAckPending: jetbus.DefaultMaxInFlight,
		})
		require.NoError(b, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := cons.Fetch(benchRawBatch, natsjs.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					continue
				}
				var msgs []natsjs.Msg
				last := map[string]int{}
				var models []mongo.WriteModel
				for m := range batch.Messages() {
					msgs = append(msgs, m)
					key := m.Headers().Get(jetbus.HeaderKey)
					var doc bson.D
					if err := bson.UnmarshalExtJSON(m.Data(), false, &doc); err != nil {
						errs <- err
						return
					}
					meta, _ := m.Metadata()
					doc = append(bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: int64(meta.Sequence.Stream)},
						{Key: "_ts", Value: meta.Timestamp}, {Key: "_topic", Value: "orders"}}, doc...)
					model := mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: key}}).SetReplacement(doc).SetUpsert(true)
					if i, ok := last[key]; ok {
						models[i] = model
						continue
					}
					last[key] = len(models)
					models = append(models, model)
				}
				if len(msgs) == 0 {
					continue
				}
				if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				for _, m := range msgs {
					_ = m.Ack()
				}
				n.Add(int64(len(msgs)))
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Minute)
	for n.Load() < benchEvents {
		select {
		case err := <-errs:
			b.Fatalf("raw: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		require.True(b, time.Now().Before(deadline), "raw: wrote %d of %d", n.Load(), benchEvents)
	}
	be.caughtUp(b, group)
	cancel()
	wg.Wait()
	return benchEvents
}

// BenchmarkChangelogLatency measures, with the default configuration, how long an event
// published at a low rate (10 events a second) takes to become visible in the view: from
// before the publish until a read of the key returns its version. It reports p50, p99 and
// Linger; the target is p50 ≤ Linger + 20 ms (a quiet topic adds at most Linger).
func BenchmarkChangelogLatency(b *testing.B) {
	const (
		rate   = 10
		events = 50
	)
	s := embeddedtest.NATS(b)
	bus := embeddedtest.Bus(b, s.ClientURL())
	db := embeddedtest.Mongo(b)
	ctx := b.Context()
	require.NoError(b, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders", Partitions: benchPartitions}))
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = q.Close() })
	cfg := projection.Config{Name: "latency", Topic: "orders", Database: db.Name(), Collection: "latency"}
	c, err := projection.NewChangelog(bus, db.Client(), q, cfg)
	require.NoError(b, err)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	defer func() { cancel(); require.NoError(b, <-done) }()
	coll := db.Collection("latency")
	visible := func(key string, seq uint64) bool {
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: bson.D{{Key: "$gte", Value: int64(seq)}}}}).Err()
		return err == nil
	}
	// Warm up: the group's consumers exist and own their partitions.
	ev, err := bus.Publish(ctx, "orders", map[string]int{"n": -1}, jetbus.WithKey("warm"))
	require.NoError(b, err)
	require.Eventually(b, func() bool { return visible("warm", ev.Seq) }, time.Minute, time.Millisecond)

	var took []time.Duration
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	b.ResetTimer()
	for range b.N {
		for i := range events {
			<-tick.C
			key := "k" + strconv.Itoa(i)
			t0 := time.Now()
			ev, err := bus.Publish(ctx, "orders", map[string]int{"n": i}, jetbus.WithKey(key))
			require.NoError(b, err)
			for !visible(key, ev.Seq) {
				require.Less(b, time.Since(t0), time.Minute, "event %d never became visible", i)
				time.Sleep(200 * time.Microsecond)
			}
			took = append(took, time.Since(t0))
		}
	}
	b.StopTimer()
	slices.Sort(took)
	q50, q99 := took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
	b.ReportMetric(float64(q50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(q99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(projection.DefaultLinger.Microseconds())/1000, "linger-ms")
}
