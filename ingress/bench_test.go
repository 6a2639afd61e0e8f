package ingress_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// The benchmarks put ingress beside what a client would do without it, in the same run,
// against the same embedded server (file storage, one-partition topics, no schema): every
// side does its share in rounds, the order rotated each round, so that load from elsewhere
// on the machine falls on all alike. BENCHMARKS.md ("Ingress") holds the figures.

var benchPayload = []byte(`{"order":12345,"customer":"c-987","amount":42.5,"items":["a","b","c"]}`)

const benchRounds = 10

type benchEnv struct {
	*env
	g      *running
	client *nats.Conn       // a raw client of ingress
	bus    *jbjs.Bus        // a plain Bus on its own connection: the baseline
	rawJS  natsjs.JetStream // raw nats.go on its own connection: the other baseline
}

func newBenchEnv(b *testing.B, topics ...string) *benchEnv {
	b.Helper()
	s := embeddedtest.NATS(b)
	var tcs []jbjs.TopicConfig
	for _, t := range topics {
		tcs = append(tcs, jbjs.TopicConfig{Name: t})
	}
	e := newEnvOn(b, s, s.ClientURL(), tcs...)
	g := e.run(ingress.Config{Allow: topics})
	bus := embeddedtest.Bus(b, s.ClientURL())
	rawJS, err := natsjs.New(embeddedtest.Connect(b, s.ClientURL()), natsjs.WithPublishAsyncMaxPending(4000))
	require.NoError(b, err)
	return &benchEnv{env: e, g: g, client: client(b, s.ClientURL()), bus: bus, rawJS: rawJS}
}

// side is one way of doing n operations; it returns how long they took.
type side struct {
	name string
	run  func(n int) time.Duration
}

// rounds runs every side benchRounds times on b.N/benchRounds operations each, rotating which
// goes first, and returns each side's total time.
func rounds(b *testing.B, sides ...side) []time.Duration {
	n := max(b.N/benchRounds, 1)
	total := make([]time.Duration, len(sides))
	for r := range benchRounds {
		for i := range sides {
			k := (i + r) % len(sides)
			total[k] += sides[k].run(n)
		}
	}
	b.ReportMetric(0, "ns/op")
	return total
}

func ops(b *testing.B) float64 { return float64(max(b.N/benchRounds, 1) * benchRounds) }

// waitAccepted waits until ingress has stored target events in all.
func waitAccepted(b *testing.B, g *running, target uint64) {
	deadline := time.Now().Add(time.Minute)
	for g.Stats().Accepted < target {
		if time.Now().After(deadline) {
			b.Fatalf("ingress stored %d of %d", g.Stats().Accepted, target)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// BenchmarkFireAndForget: a raw client publishes n messages to in.<topic> without waiting,
// until ingress has them all stored (acknowledged by JetStream), against the Bus's own
// PublishAsync of n events followed by PublishAsyncComplete.
func BenchmarkFireAndForget(b *testing.B) {
	e := newBenchEnv(b, "bench.ingress", "bench.bus")
	ctx := context.Background()
	var stored uint64
	t := rounds(b,
		side{"ingress", func(n int) time.Duration {
			t0 := time.Now()
			for range n {
				if err := e.client.Publish("in.bench.ingress", benchPayload); err != nil {
					b.Fatal(err)
				}
			}
			if err := e.client.Flush(); err != nil {
				b.Fatal(err)
			}
			stored += uint64(n)
			waitAccepted(b, e.g, stored)
			return time.Since(t0)
		}},
		side{"bus", func(n int) time.Duration {
			t0 := time.Now()
			for range n {
				if _, err := e.bus.PublishAsync(ctx, "bench.bus", jsonRaw(benchPayload)); err != nil {
					b.Fatal(err)
				}
			}
			<-e.bus.PublishAsyncComplete()
			return time.Since(t0)
		}})
	b.ReportMetric(ops(b)/t[0].Seconds(), "ingress-msgs/s")
	b.ReportMetric(ops(b)/t[1].Seconds(), "bus-msgs/s")
	b.ReportMetric(float64(t[1])/float64(t[0]), "ingress/bus")
	if st := e.g.Stats(); st.Dropped > 0 || len(st.Rejected) > 0 {
		b.Fatalf("ingress dropped or refused messages: %+v", st)
	}
}

// BenchmarkRequestReply: the latency of one request to in.<topic>, answered once JetStream
// stored the event, against a direct synchronous publish of the same body with a
// Nats-Msg-Id from raw nats.go (what a client would do without ingress), the Bus's Publish,
// and the floor of any relay: a nats.go subscriber that publishes the request's body to a
// stream, waits for the acknowledgement and responds. One request or publish at a time; the
// figures are means and medians in microseconds.
func BenchmarkRequestReply(b *testing.B) {
	e := newBenchEnv(b, "bench.ingress", "bench.bus", "bench.raw", "bench.relay")
	ctx := context.Background()
	startRelay(b, e.url, "relay", jetbus.PartitionSubject("bench.relay", 0))
	var lat [4][]time.Duration
	timed := func(k int, n int, op func()) time.Duration {
		t0 := time.Now()
		for range n {
			s := time.Now()
			op()
			lat[k] = append(lat[k], time.Since(s))
		}
		return time.Since(t0)
	}
	request := func(k int, subject string) func(n int) time.Duration {
		return func(n int) time.Duration {
			return timed(k, n, func() {
				m, err := e.client.Request(subject, benchPayload, 5*time.Second)
				if err != nil || m.Header.Get("Nats-Service-Error") != "" {
					b.Fatalf("request: %v %s", err, m.Data)
				}
			})
		}
	}
	rawSubj := jetbus.PartitionSubject("bench.raw", 0)
	t := rounds(b,
		side{"ingress", request(0, "in.bench.ingress")},
		side{"raw", func(n int) time.Duration {
			return timed(1, n, func() {
				m := nats.NewMsg(rawSubj)
				m.Data = benchPayload
				m.Header.Set(jetbus.HeaderMsgID, uuid.NewString())
				if _, err := e.rawJS.PublishMsg(ctx, m); err != nil {
					b.Fatal(err)
				}
			})
		}},
		side{"bus", func(n int) time.Duration {
			return timed(2, n, func() {
				if _, err := e.bus.Publish(ctx, "bench.bus", jsonRaw(benchPayload)); err != nil {
					b.Fatal(err)
				}
			})
		}},
		side{"relay", request(3, "relay")})
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / ops(b) }
	b.ReportMetric(us(t[0]), "ingress-us")
	b.ReportMetric(us(t[1]), "raw-sync-us")
	b.ReportMetric(us(t[2]), "bus-sync-us")
	b.ReportMetric(us(t[3]), "relay-floor-us")
	b.ReportMetric(float64(t[0])/float64(t[1]), "ingress/raw")
	b.ReportMetric(float64(t[0])/float64(t[2]), "ingress/bus")
	b.ReportMetric(float64(t[3])/float64(t[1]), "relay/raw")
	b.ReportMetric(float64(t[0])/float64(t[3]), "ingress/relay")
	b.ReportMetric(median(lat[0]), "ingress-p50-us")
	b.ReportMetric(median(lat[1]), "raw-p50-us")
	b.ReportMetric(median(lat[3]), "relay-p50-us")
}

// startRelay subscribes subject on a connection of its own with the least a request-reply
// relay does: publish the body to streamSubject with a fresh Nats-Msg-Id, wait for
// JetStream's acknowledgement, respond.
func startRelay(b *testing.B, url, subject, streamSubject string) {
	b.Helper()
	nc := embeddedtest.Connect(b, url)
	js, err := natsjs.New(nc)
	require.NoError(b, err)
	_, err = nc.Subscribe(subject, func(m *nats.Msg) {
		pm := nats.NewMsg(streamSubject)
		pm.Data = m.Data
		pm.Header.Set(jetbus.HeaderMsgID, uuid.NewString())
		f, err := js.PublishMsgAsync(pm)
		if err != nil {
			return
		}
		select {
		case <-f.Ok():
			_ = m.Respond([]byte(`{}`))
		case <-f.Err():
		}
	})
	require.NoError(b, err)
}

func median(ds []time.Duration) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Nanoseconds()) / 1e3
}
