package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/spans"
	"github.com/jetbus/jetbus/internal/streamscan"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/internal/tracing/otlptest"
)

// Following one event end to end (docs/operations.md, "Tracing"): the processes export their
// spans to an in-process OTLP receiver, sampling everything; clients publish through ingress
// with a traceparent and read their writes back with ?after= under the same trace; a
// projector is SIGKILLed between two rounds, and one event fails in the projection (a unique
// index clash), is dead-lettered, and is replayed with `bridge dlq replay` once the clash is
// fixed. Every event must then be one connected trace — parent and link edges, the client's
// span included when the client exported it — of at least six spans: ingress, the bridge's
// publish, the projector's consumer span and batch write, the HTTP read and its wait.

// The spans every traced event's trace holds.
var traceHops = []string{"ingress orders", "publish orders", "process orders", "projection write orders-view",
	"GET /v1/views/{view}/{key}", "await orders"}

// traceStack is a stack whose processes trace to an in-process receiver, with a unique index
// on the orders view's email (the failure the scenario provokes), a bridge and two projectors.
func traceStack(t *testing.T) (*stack, *otlptest.Receiver) {
	t.Helper()
	s := newStack(t)
	r := otlptest.Start(t)
	s.env = append(s.env, "JETBUS_TRACING_ENABLED=true", "JETBUS_TRACING_ENDPOINT="+r.HTTPEndpoint(),
		"JETBUS_TRACING_SAMPLER_RATIO=1", "OTEL_BSP_SCHEDULE_DELAY=100")
	cfg := strings.Replace(s.yaml(), "indexes: [{fields: [status]}, {fields: [total]}]",
		"indexes: [{fields: [status]}, {fields: [total]}, {fields: [email], unique: true}]", 1)
	require.Contains(t, cfg, "unique: true")
	require.NoError(t, os.WriteFile(s.config, []byte(cfg), 0o644))
	s.startProc("bridge")
	s.startProc("projector")
	s.startProc("projector")
	return s, r
}

// clientTracer is the test's own client: a tracer provider exporting to r as service
// e2e-client, and the func that exports what it holds.
func clientTracer(t *testing.T, r *otlptest.Receiver) (trace.Tracer, func()) {
	t.Helper()
	p, err := tracing.Start(t.Context(), tracing.Config{Enabled: true, Endpoint: r.HTTPEndpoint(), SamplerRatio: 1, ServiceName: "e2e-client"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	flusher, ok := p.TracerProvider().(interface{ ForceFlush(context.Context) error })
	require.True(t, ok, "the SDK's provider flushes")
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, flusher.ForceFlush(ctx))
	}
	return p.TracerProvider().Tracer("jetbus-e2e"), flush
}

// tracedEvent is an event a client published under a trace: the Go client's span (ctx), or
// the foreign client's traceparent, which its reads send too (that client exports no span).
type tracedEvent struct {
	acked
	trace string          // the trace ID
	ctx   context.Context // the Go client's publish span; nil for the foreign client
}

func traced(a acked) tracedEvent {
	return tracedEvent{acked: a, trace: jetbus.TraceIDOf(a.TraceParent)}
}

// publishTraced sends body with key to in.orders under a client span of tr, as a request,
// retrying while ingress answers unavailable, and returns the event.
func publishTraced(t *testing.T, nc *nats.Conn, tr trace.Tracer, id, key, body string) tracedEvent {
	t.Helper()
	ctx, span := tr.Start(context.Background(), "client publish in.orders", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	m := nats.NewMsg("in.orders")
	m.Header.Set(jetbus.HeaderMsgID, id)
	m.Header.Set(jetbus.HeaderKey, key)
	m.Header.Set(jetbus.HeaderTraceParent, spans.TraceParent(span.SpanContext()))
	m.Data = []byte(body)
	var r struct {
		acked
		Error *struct{ Code, Message string } `json:"error"`
	}
	require.True(t, poll(time.Minute, 100*time.Millisecond, func() bool {
		resp, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			return false
		}
		r.Error = nil
		require.NoError(t, json.Unmarshal(resp.Data, &r))
		require.True(t, r.Error == nil || r.Error.Code == "unavailable", "%s refused: %+v", id, r.Error)
		return r.Error == nil
	}), "ingress stored %s", id)
	r.acked.Key = key
	return tracedEvent{acked: r.acked, trace: span.SpanContext().TraceID().String(), ctx: ctx}
}

// readTraced reads ev's key from a running projector with ?after= its position, until the
// answer is want (200, or 404 for an event not applied), under a client span of tr that is a
// child of the event's publish span, or with the foreign client's traceparent.
func (s *stack) readTraced(t *testing.T, tr trace.Tracer, ev tracedEvent, want int) {
	t.Helper()
	tp := ev.TraceParent
	if ev.ctx != nil {
		_, span := tr.Start(ev.ctx, "client read", trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		tp = spans.TraceParent(span.SpanContext())
	}
	path := fmt.Sprintf("/v1/views/orders/%s?after=%d:%d&wait=2s", url.PathEscape(ev.Key), ev.Partition, ev.Seq)
	var code int
	ok := poll(90*time.Second, 50*time.Millisecond, func() bool {
		ps := s.running("projector")
		if len(ps) == 0 {
			return false
		}
		req, err := http.NewRequest(http.MethodGet, ps[ev.I%len(ps)].url(path), nil)
		require.NoError(t, err)
		req.Header.Set(jetbus.HeaderTraceParent, tp)
		resp, err := httpClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		code = resp.StatusCode
		if code == want {
			assert.Equal(t, ev.trace, jetbus.TraceIDOf(resp.Header.Get("traceresponse")), "traceresponse names the read's trace")
		}
		return code == want
	})
	require.True(t, ok, "read %s: last answer %d, want %d", path, code, want)
}

// component returns the spans connected to the spans of trace id, through parents (a parent
// that was not exported, a client's, joins its children all the same) and links.
func component(all []otlptest.Span, id string) []otlptest.Span {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		for parent[x] != "" && parent[x] != x {
			x = parent[x]
		}
		return x
	}
	union := func(a, b string) {
		if ra, rb := find(a), find(b); ra != rb {
			parent[ra] = rb
		}
	}
	key := func(traceID, spanID string) string { return traceID + "/" + spanID }
	for _, sp := range all {
		k := key(sp.TraceID, sp.SpanID)
		if parent[k] == "" {
			parent[k] = k
		}
		if sp.ParentSpanID != "" {
			union(k, key(sp.TraceID, sp.ParentSpanID))
		}
		for _, l := range sp.Links {
			union(k, key(l.TraceID, l.SpanID))
		}
	}
	roots := map[string]bool{}
	for _, sp := range all {
		if sp.TraceID == id {
			roots[find(key(sp.TraceID, sp.SpanID))] = true
		}
	}
	var out []otlptest.Span
	for _, sp := range all {
		if roots[find(key(sp.TraceID, sp.SpanID))] {
			out = append(out, sp)
		}
	}
	if len(roots) > 1 { // not one connected trace: report none, the caller fails on it
		return nil
	}
	return out
}

func spanNames(sps []otlptest.Span) []string {
	var out []string
	for _, sp := range sps {
		out = append(out, sp.Service+": "+sp.Name)
	}
	slices.Sort(out)
	return out
}

// hasHops reports whether sps, the spans connected to trace id, hold every span of traceHops
// of that event, from the right process: in its trace, but for the batch write, which may be
// another event's child, and must then link to one of this event's consumer spans, itself
// or through one of its "projection links" children (a batch of more sampled events than a
// span keeps links for).
func hasHops(sps []otlptest.Span, id string) bool {
	process := map[string]bool{}
	writes := map[string]bool{}
	for _, sp := range sps {
		if sp.TraceID == id && sp.Name == "process orders" {
			process[sp.SpanID] = true
		}
		if sp.Name == "projection write orders-view" {
			writes[sp.TraceID+"/"+sp.SpanID] = true
		}
	}
	linksHere := func(sp otlptest.Span) bool {
		return slices.ContainsFunc(sp.Links, func(l otlptest.Link) bool { return l.TraceID == id && process[l.SpanID] })
	}
	viaLinks := slices.ContainsFunc(sps, func(sp otlptest.Span) bool {
		return sp.Name == "projection links orders-view" && linksHere(sp) && writes[sp.TraceID+"/"+sp.ParentSpanID]
	})
	for _, h := range traceHops {
		service := "jetbus-projector"
		if strings.HasPrefix(h, "ingress") || strings.HasPrefix(h, "publish") {
			service = "jetbus-bridge"
		}
		if !slices.ContainsFunc(sps, func(sp otlptest.Span) bool {
			if sp.Name != h || sp.Service != service {
				return false
			}
			if h != "projection write orders-view" {
				return sp.TraceID == id
			}
			return viaLinks || sp.TraceID == id && process[sp.ParentSpanID] || linksHere(sp)
		}) {
			return false
		}
	}
	return true
}

// awaitTraces waits until each event is one connected trace holding every hop.
func awaitTraces(t *testing.T, r *otlptest.Receiver, evs []tracedEvent) {
	t.Helper()
	var last string
	ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
		all := r.Spans()
		for _, ev := range evs {
			c := component(all, ev.trace)
			if len(c) < len(traceHops) || !hasHops(c, ev.trace) {
				last = fmt.Sprintf("%s (trace %s): %v", ev.ID, ev.trace, spanNames(c))
				return false
			}
		}
		return true
	})
	require.True(t, ok, "every event one connected trace of its hops; not yet: %s", last)
}

// storedTraceParents reads stream's messages' traceparent by event ID (a dead letter's by its
// original's ID, a replay by its own).
func (s *stack) storedTraceParents(t *testing.T, stream string) map[string]string {
	t.Helper()
	js, err := natsjs.New(s.connect(t, userAdmin))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := map[string]string{}
	require.NoError(t, streamscan.Scan(ctx, js, stream, natsjs.OrderedConsumerConfig{}, func(m natsjs.Msg, _ *natsjs.MsgMetadata) bool {
		id := m.Headers().Get(jetbus.HeaderMsgID)
		if o := m.Headers().Get(dlq.HeaderOriginalID); o != "" {
			id = o
		}
		out[id] = m.Headers().Get(jetbus.HeaderTraceParent)
		return true
	}))
	return out
}

// dlqReplay runs `bridge dlq replay` for the orders view's letters, as an operator would, with
// the processes' tracing.
func (s *stack) dlqReplay(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "bridge"), "dlq", "replay", "--config", s.config, "--topic", "orders", "--group", "orders-view")
	cmd.Env = append(s.procEnv(userBridge), s.env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "bridge dlq replay: %s", out)
	return string(out)
}

// traceScenario runs the scenario with rounds of n events each published through ingress by
// the foreign client (Node, or its nats.go stand-in) and one by the Go client exporting its own
// spans; with loadSeconds > 0, under that many seconds of the scenarios' load (untraced
// clients, every event traced by the processes all the same), whose invariants it then checks.
func traceScenario(t *testing.T, n, loadSeconds int) {
	s, r := traceStack(t)
	tr, flushClient := clientTracer(t, r)
	var ld *load
	if loadSeconds > 0 {
		ld = s.startLoad(t, "trload", loadSeconds, envInt("JETBUS_E2E_RATE", 100))
		ld.waitProgress(0.1, 2*time.Minute)
	}
	nc := s.connect(t, userClient)
	var evs []tracedEvent

	read := func(ev tracedEvent, want int) { s.readTraced(t, tr, ev, want) }
	round := func(name string) {
		l := newLedger()
		require.NoError(t, s.publishIngress(t.Context(), t, l, publishPlan{Prefix: name, Count: n, Keys: n, Trace: true}))
		_, failed, _ := l.counts()
		require.Zero(t, failed, "every traced event stored: %v", l.failed)
		var round []tracedEvent
		for _, a := range l.acked {
			require.NotEmpty(t, a.TraceParent, "%s sent with a traceparent", a.ID)
			round = append(round, traced(a))
		}
		own := publishTraced(t, nc, tr, name+"-go", name+"-go", fmt.Sprintf(`{"n":1,"status":"open","total":1,"email":%q}`, name+"@example.com"))
		own.I = len(evs) + len(round)
		round = append(round, own)
		for _, ev := range round {
			read(ev, http.StatusOK)
		}
		evs = append(evs, round...)
	}

	round("tr1")
	// Everything so far exported, then a projector dies: its spans are all out, and the next
	// events wait for its partitions to be taken over.
	flushClient()
	awaitTraces(t, r, evs)
	victim := s.running("projector")[0]
	victim.Kill()
	t.Logf("SIGKILLed %s after %d traced events", victim.Name, len(evs))
	round("tr2")
	s.startProc("projector")

	// The failure: B's email clashes with A's in the view's unique index, so the projector
	// dead-letters B; A moves to another email, and B is replayed.
	a := publishTraced(t, nc, tr, "tr-a", "tr-a", `{"n":1,"email":"clash@example.com"}`)
	read(a, http.StatusOK)
	b := publishTraced(t, nc, tr, "tr-b", "tr-b", `{"n":1,"email":"clash@example.com"}`)
	b.I = 1
	read(b, http.StatusNotFound) // applied: dead-lettered, not written
	var letterTP string
	require.True(t, poll(30*time.Second, 100*time.Millisecond, func() bool {
		letterTP = s.storedTraceParents(t, dlq.StreamName)["tr-b"]
		return letterTP != ""
	}), "B is dead-lettered")
	assert.Equal(t, b.trace, jetbus.TraceIDOf(letterTP), "the dead letter keeps B's trace context")
	fix := publishTraced(t, nc, tr, "tr-a2", "tr-a", `{"n":2,"email":"moved@example.com"}`)
	read(fix, http.StatusOK)
	out := s.dlqReplay(t)
	t.Logf("bridge dlq replay: %s", strings.TrimSpace(out))
	require.Contains(t, out, "replayed 1 of 1")

	// The replayed event, in the topic under B's trace; its read is B's.
	topic := s.scanStream(t, "orders")
	replayID := ""
	for _, m := range topic {
		if strings.HasPrefix(m.ID, "replay:") {
			replayID = m.ID
			var p int
			_, err := fmt.Sscanf(m.Subject, "orders.p%d", &p)
			require.NoError(t, err)
			b.Partition, b.Seq = p, m.Seq
		}
	}
	require.NotEmpty(t, replayID, "the replayed event is in the topic")
	assert.Equal(t, b.trace, jetbus.TraceIDOf(s.storedTraceParents(t, "orders")[replayID]), "the replayed event continues B's trace")
	assert.Equal(t, b.trace, jetbus.TraceIDOf(s.storedTraceParents(t, "orders")["tr-b"]), "B stored in its client's trace")
	read(b, http.StatusOK)

	stored := s.storedTraceParents(t, "orders")
	for _, ev := range slices.Concat(evs, []tracedEvent{a, fix}) {
		assert.Equal(t, ev.trace, jetbus.TraceIDOf(stored[ev.ID]), "%s stored in its client's trace", ev.ID)
	}
	flushClient()
	awaitTraces(t, r, slices.Concat(evs, []tracedEvent{a, b, fix}))

	// B's trace tells the whole story: the failure, the dead letter, the replay (linked to
	// the original span and to the replay run), and the replayed event written and read.
	var c []otlptest.Span
	var own map[string]int // B's spans by name: in its trace, and the writes linked to it
	require.True(t, poll(30*time.Second, 200*time.Millisecond, func() bool {
		c = component(r.Spans(), b.trace)
		own = map[string]int{}
		process := map[string]bool{}
		for _, sp := range c {
			if sp.TraceID == b.trace {
				own[sp.Service+": "+sp.Name]++
				if sp.Name == "process orders" {
					process[sp.SpanID] = true
				}
			}
		}
		for _, sp := range c {
			if sp.Name == "projection write orders-view" && sp.TraceID != b.trace &&
				slices.ContainsFunc(sp.Links, func(l otlptest.Link) bool { return process[l.SpanID] }) {
				own[sp.Service+": "+sp.Name]++
			}
		}
		return own["jetbus-projector: dead-letter orders"] == 1 && own["jetbus-bridge: replay orders"] == 1 &&
			own["jetbus-projector: process orders"] >= 2 && own["jetbus-projector: projection write orders-view"] >= 2 &&
			own["jetbus-projector: GET /v1/views/{view}/{key}"] >= 2 && own["e2e-client: client publish in.orders"] == 1
	}), "B's trace: the failure, the dead letter, the replay, the replayed event written and read; got %v", own)
	names := spanNames(c)
	assert.Contains(t, names, "jetbus-bridge: dlq replay", "the replay run, through its link")
	for _, sp := range c {
		switch sp.Name {
		case "replay orders":
			assert.Equal(t, b.trace, sp.TraceID)
			assert.Equal(t, letterTP[36:52], sp.ParentSpanID, "a child of the original event's span")
			assert.Contains(t, sp.Links, otlptest.Link{TraceID: b.trace, SpanID: letterTP[36:52]}, "linked to the original span")
		case "dead-letter orders":
			assert.Equal(t, b.trace, sp.TraceID)
		}
	}
	all := r.Spans()
	t.Logf("%d events, each one connected trace; B's own spans: %v; %d spans received, %d of them writes' links beyond 128",
		len(evs)+3, own, len(all), countNamed(all, "projection links orders-view"))
	if ld != nil {
		fig := ld.finish(4 * time.Minute)
		msgs := s.scanStream(t, "orders")
		checkTopic(t, msgs, ld.l)
		s.checkView(t, "orders", msgs)
		report(t, "traced, 1 projector SIGKILL, 1 event dead-lettered and replayed", fig)
	}
	s.checkNoViolations(t)
}

// TestTraceSmoke is the short run of the tracing scenario (three events a round through the
// foreign client, one through the Go client): part of the smoke.
func TestTraceSmoke(t *testing.T) {
	traceScenario(t, 3, 0)
}

func countNamed(sps []otlptest.Span, name string) int {
	n := 0
	for _, sp := range sps {
		if sp.Name == name {
			n++
		}
	}
	return n
}
