package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// The Bus the package is used with has what it needs of one.
var _ ingress.Publisher = (*jbjs.Bus)(nil)

const wait = 20 * time.Second

// env is what the bridge gives ingress, on an embedded server: a Bus with the schema
// registry's publish middleware, the DLQ, and the topics. Clients are raw nats.go connections
// (client): no jetbus package is on their path.
type env struct {
	t   testing.TB
	srv *server.Server
	url string
	bus *jbjs.Bus
	reg *schema.Registry
	q   *dlq.Queue
	js  natsjs.JetStream // raw, to read what was stored
}

func newEnv(t *testing.T, topics ...jbjs.TopicConfig) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	return newEnvOn(t, s, s.ClientURL(), topics...)
}

func newEnvOn(t testing.TB, s *server.Server, url string, topics ...jbjs.TopicConfig) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, srv: s, url: url}
	e.bus, e.reg = e.publisher()
	e.js = e.bus.JetStream()
	q, err := dlq.Open(ctx, e.js, dlq.Config{}, dlq.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	e.q = q
	for _, tc := range topics {
		require.NoError(t, e.bus.EnsureTopic(ctx, tc))
	}
	return e
}

// publisher opens what a bridge process publishes through: a Bus on a connection of its own
// with the schema registry's publish middleware.
func (e *env) publisher() (*jbjs.Bus, *schema.Registry) {
	e.t.Helper()
	ctx := context.Background()
	nc := embeddedtest.Connect(e.t, e.url)
	js, err := natsjs.New(nc)
	require.NoError(e.t, err)
	reg, err := schema.Open(ctx, js)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = reg.Close() })
	bus, err := jbjs.Open(ctx, nc, jbjs.WithPublishMiddleware(reg.PublishMiddleware()),
		jbjs.WithAsyncMaxPending(ingress.DefaultMaxInFlight), jbjs.WithLogger(embeddedtest.Logger(e.t)))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = bus.Close() })
	return bus, reg
}

// running is an ingress replica running in the test.
type running struct {
	*ingress.Ingress
	conn    *nats.Conn
	metrics *prometheus.Registry
	logs    *logRecorder
	cancel  context.CancelFunc
	done    chan error
}

// stop stops the replica (as SIGTERM would) and returns Run's result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(wait):
		t.Fatal("ingress did not stop")
		return nil
	}
}

// run starts an ingress replica on a connection of its own and waits until it serves.
func (e *env) run(cfg ingress.Config) *running {
	e.t.Helper()
	return e.runWith(e.bus, cfg)
}

// runWith starts an ingress replica that publishes through pub.
func (e *env) runWith(pub ingress.Publisher, cfg ingress.Config) *running {
	e.t.Helper()
	conn := embeddedtest.Connect(e.t, e.url)
	reg := prometheus.NewRegistry()
	logs := &logRecorder{Handler: embeddedtest.Logger(e.t).Handler(), seen: &logSeen{}}
	g, err := ingress.New(conn, pub, e.q, cfg, ingress.WithLogger(slog.New(logs)), ingress.WithRegisterer(reg))
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Ingress: g, conn: conn, metrics: reg, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Run(ctx) }()
	e.t.Cleanup(func() { _ = r.stop(e.t) })
	require.Eventually(e.t, func() bool { return g.Ready(ctx) == nil }, wait, 5*time.Millisecond, "ingress serves")
	return r
}

// client is an untrusted NATS client: nothing but nats.go.
func client(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// request sends body to subject with headers (name, value pairs) and waits for the answer.
func request(t testing.TB, nc *nats.Conn, subject string, body []byte, headers ...string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Add(headers[i], headers[i+1])
	}
	resp, err := nc.RequestMsg(m, wait)
	require.NoError(t, err, "request to %s", subject)
	return resp
}

// okReply is the success reply as a client decodes it.
type okReply struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

type errReply struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

func decodeOK(t *testing.T, m *nats.Msg) okReply {
	t.Helper()
	require.Empty(t, m.Header.Get("Nats-Service-Error"), "an error reply: %s", m.Data)
	var r okReply
	require.NoError(t, json.Unmarshal(m.Data, &r), "%s", m.Data)
	return r
}

func decodeErr(t *testing.T, m *nats.Msg) errReply {
	t.Helper()
	var r errReply
	require.NoError(t, json.Unmarshal(m.Data, &r), "%s", m.Data)
	require.NotEmpty(t, r.Error.Code, "not an error reply: %s", m.Data)
	return r
}

// stored returns the messages of topic's stream, in order.
func (e *env) stored(topic string) []*natsjs.RawStreamMsg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	require.NoError(e.t, err)
	info, err := s.Info(ctx)
	require.NoError(e.t, err)
	var out []*natsjs.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		require.NoError(e.t, err)
		out = append(out, m)
	}
	return out
}

// count returns the number of messages in topic's stream.
func (e *env) count(topic string) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	require.NoError(e.t, err)
	info, err := s.Info(ctx)
	require.NoError(e.t, err)
	return info.State.Msgs
}

// letters lists the dead letters ingress filed.
func (e *env) letters(f dlq.Filter) []*dlq.Letter {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f.Reason = dlq.ReasonIngress
	ls, err := e.q.List(ctx, f, 0)
	require.NoError(e.t, err)
	return ls
}

// dlqCount returns the number of refusals stored (in the refusals' stream).
func (e *env) dlqCount() uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := e.js.Stream(ctx, dlq.RejectsStreamName)
	require.NoError(e.t, err)
	info, err := s.Info(ctx)
	require.NoError(e.t, err)
	return info.State.Msgs
}

// numbers reads every message of topic and counts each body's "n".
func (e *env) numbers(topic string) map[int]int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	total := e.count(topic)
	cons, err := e.js.OrderedConsumer(ctx, jetbus.StreamName(topic), natsjs.OrderedConsumerConfig{})
	require.NoError(e.t, err)
	seen := make(map[int]int, total)
	for got := uint64(0); got < total; {
		batch, err := cons.FetchNoWait(1000)
		require.NoError(e.t, err)
		for m := range batch.Messages() {
			var v struct{ N int }
			require.NoError(e.t, json.Unmarshal(m.Data(), &v))
			seen[v.N]++
			got++
		}
		require.NoError(e.t, ctx.Err())
	}
	return seen
}

// ids reads every message of topic and returns the stream sequences of each event ID.
func (e *env) ids(topic string) map[string][]uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	total := e.count(topic)
	cons, err := e.js.OrderedConsumer(ctx, jetbus.StreamName(topic), natsjs.OrderedConsumerConfig{})
	require.NoError(e.t, err)
	out := make(map[string][]uint64, total)
	for got := uint64(0); got < total; {
		batch, err := cons.FetchNoWait(1000)
		require.NoError(e.t, err)
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			require.NoError(e.t, err)
			id := m.Headers().Get(jetbus.HeaderMsgID)
			out[id] = append(out[id], meta.Sequence.Stream)
			got++
		}
		require.NoError(e.t, ctx.Err())
	}
	return out
}

// metricValue returns the value of the series of metric name with the given label pairs
// (a histogram's sample count) in the replica's registry, or 0 when there is none.
func metricValue(t *testing.T, r *running, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

// jsonRaw is the payload as the Bus takes it without re-encoding.
func jsonRaw(b []byte) json.RawMessage { return json.RawMessage(b) }

// logRecorder passes records on to the test's log and remembers their messages, so that a
// test can check what ingress told the operator.
type logRecorder struct {
	slog.Handler
	seen *logSeen
}

type logSeen struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	l.seen.mu.Lock()
	l.seen.msgs = append(l.seen.msgs, r.Level.String()+" "+r.Message)
	l.seen.mu.Unlock()
	return l.Handler.Handle(ctx, r)
}

func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{Handler: l.Handler.WithAttrs(as), seen: l.seen}
}

func (l *logRecorder) WithGroup(name string) slog.Handler {
	return &logRecorder{Handler: l.Handler.WithGroup(name), seen: l.seen}
}

// logged reports whether a record at level with a message containing part was logged.
func (l *logRecorder) logged(level slog.Level, part string) bool {
	l.seen.mu.Lock()
	defer l.seen.mu.Unlock()
	for _, m := range l.seen.msgs {
		if strings.HasPrefix(m, level.String()+" ") && strings.Contains(m, part) {
			return true
		}
	}
	return false
}
