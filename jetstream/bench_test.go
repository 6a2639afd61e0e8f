package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// The benchmarks compare the Bus with raw nats.go calls in the same run, against the same
// embedded server: "raw" publishes the same body with an ID header (the Bus's dedup key) to
// the same kind of stream; "bus" goes through jetstream.Bus. BENCHMARKS.md holds the ratios.

var benchPayload = json.RawMessage(`{"order":12345,"customer":"c-987","amount":42.5,"items":["a","b","c"]}`)

type benchEnv struct {
	bus *jbjs.Bus
	js  natsjs.JetStream
	nc  *nats.Conn
	n   atomic.Int64
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	s := embeddedtest.NATS(b)
	nc := embeddedtest.Connect(b, s.ClientURL())
	bus, err := jbjs.Open(context.Background(), nc)
	require.NoError(b, err)
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4000))
	require.NoError(b, err)
	return &benchEnv{bus: bus, js: js, nc: nc}
}

// topic creates a fresh one-partition topic; raw and bus publish to the same kind of stream.
func (e *benchEnv) topic(b *testing.B) string {
	b.Helper()
	name := fmt.Sprintf("bench.t%d", e.n.Add(1))
	require.NoError(b, e.bus.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: name}))
	return name
}

func rawMsg(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = benchPayload
	m.Header.Set(jetbus.HeaderMsgID, uuid.NewString())
	return m
}

// abRounds interleaves raw and bus work, alternating which goes first, so that load from
// anything else on the machine falls on both alike; each benchmark reports both rates and their ratio (bus/raw).
const abRounds = 10

// ab runs raw(n) and bus(n) alternately for abRounds rounds of b.N/abRounds operations and
// reports the rates and the ratio. lowerIsBetter selects a latency ratio (bus/raw time)
// instead of a throughput ratio (bus/raw rate).
func ab(b *testing.B, raw, bus func(n int) time.Duration, lowerIsBetter bool) {
	abNamed(b, "raw", "bus", raw, bus, lowerIsBetter)
}

// abNamed is ab with the two sides named rawName and busName in the reported metrics
// (<name>-ops/s, <name>-us/op); the ratio is still the second side's to the first's.
func abNamed(b *testing.B, rawName, busName string, raw, bus func(n int) time.Duration, lowerIsBetter bool) {
	n := max(b.N/abRounds, 1)
	var rawT, busT time.Duration
	for i := range abRounds {
		// Alternate which side goes first: work the server defers (flushes, acks) from one
		// side's round must not always land on the other's.
		if i%2 == 0 {
			rawT += raw(n)
			busT += bus(n)
		} else {
			busT += bus(n)
			rawT += raw(n)
		}
	}
	ops := float64(n * abRounds)
	b.ReportMetric(ops/rawT.Seconds(), rawName+"-ops/s")
	b.ReportMetric(ops/busT.Seconds(), busName+"-ops/s")
	if lowerIsBetter {
		b.ReportMetric(float64(busT)/float64(rawT), "latency-ratio")
		b.ReportMetric(float64(rawT.Microseconds())/ops, rawName+"-us/op")
		b.ReportMetric(float64(busT.Microseconds())/ops, busName+"-us/op")
	} else {
		b.ReportMetric(float64(rawT)/float64(busT), "throughput-ratio")
	}
	b.ReportMetric(0, "ns/op")
}

func BenchmarkPublishAsync(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	rawSubj := jetbus.PartitionSubject(e.topic(b), 0)
	busTopic := e.topic(b)
	ab(b, func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := e.js.PublishMsgAsync(rawMsg(rawSubj)); err != nil {
				b.Fatal(err)
			}
		}
		<-e.js.PublishAsyncComplete()
		return time.Since(t0)
	}, func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := e.bus.PublishAsync(ctx, busTopic, benchPayload); err != nil {
				b.Fatal(err)
			}
		}
		<-e.bus.PublishAsyncComplete()
		return time.Since(t0)
	}, false)
}

func BenchmarkPublishSync(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	rawSubj := jetbus.PartitionSubject(e.topic(b), 0)
	busTopic := e.topic(b)
	ab(b, func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := e.js.PublishMsg(ctx, rawMsg(rawSubj)); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}, func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := e.bus.Publish(ctx, busTopic, benchPayload); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}, true)
}

// fill publishes n events to topic through the Bus and waits until they are stored.
func (e *benchEnv) fill(b *testing.B, topic string, n int) {
	b.Helper()
	ctx := context.Background()
	for range n {
		for {
			_, err := e.bus.PublishAsync(ctx, topic, benchPayload)
			if err == nil {
				break
			}
			if !errors.Is(err, jetbus.ErrUnavailable) {
				b.Fatal(err)
			}
			<-e.bus.PublishAsyncComplete() // the server is behind: let it catch up
		}
	}
	select {
	case <-e.bus.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("fill timed out")
	}
}

// BenchmarkConsumeAck consumes n stored events with a handler that decodes the JSON body and
// acknowledges: raw is a durable pull consumer's Messages iterator with msg.Ack; bus is a
// Subscribe on a fresh group. Consumer creation is timed on both sides.
func BenchmarkConsumeAck(b *testing.B) { benchConsume(b, false) }

// BenchmarkConsumeAckPinnedRaw is BenchmarkConsumeAck with the raw consumer configured as the
// Bus configures its own (pinned_client priority group): it separates what the Bus's client
// side costs from what the second fence costs the server.
func BenchmarkConsumeAckPinnedRaw(b *testing.B) { benchConsume(b, true) }

func benchConsume(b *testing.B, pinnedRaw bool) {
	e := newBenchEnv(b)
	ctx := context.Background()
	ab(b, func(n int) time.Duration {
		topic := e.topic(b)
		e.fill(b, topic, n)
		t0 := time.Now()
		cfg := natsjs.ConsumerConfig{
			Durable: "raw", AckPolicy: natsjs.AckExplicitPolicy, MaxAckPending: 1000,
			FilterSubject: jetbus.PartitionSubject(topic, 0),
		}
		pull := []natsjs.PullMessagesOpt{natsjs.PullMaxMessages(100)}
		if pinnedRaw {
			cfg.PriorityPolicy = natsjs.PriorityPolicyPinned
			cfg.PriorityGroups = []string{jetbus.PriorityGroup}
			cfg.PinnedTTL = 10 * time.Second
			pull = append(pull, natsjs.PullPriorityGroup(jetbus.PriorityGroup))
		}
		cons, err := e.js.CreateConsumer(ctx, jetbus.StreamName(topic), cfg)
		require.NoError(b, err)
		it, err := cons.Messages(pull...)
		require.NoError(b, err)
		for range n {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			var v map[string]any // decode, as a handler would
			if err := json.Unmarshal(m.Data(), &v); err != nil {
				b.Fatal(err)
			}
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(t0)
		it.Stop()
		return d
	}, func(n int) time.Duration {
		topic := e.topic(b)
		e.fill(b, topic, n)
		var count atomic.Int64
		done := make(chan struct{})
		t0 := time.Now()
		sub, err := e.bus.Subscribe(ctx, topic, "bus", func(_ context.Context, d *jetbus.Delivery) error {
			var v map[string]any
			if err := json.Unmarshal(d.Payload, &v); err != nil {
				return err
			}
			if count.Add(1) == int64(n) {
				close(done)
			}
			return nil
		}, jetbus.FromEarliest(), jetbus.BatchSize(100))
		require.NoError(b, err)
		<-done
		d := time.Since(t0)
		_ = sub.Stop()
		return d
	}, false)
}
