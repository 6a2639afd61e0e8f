package jetstream

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/jsonenc"
	"github.com/jetbus/jetbus/internal/spans"
)

// fakeMsg is a delivered message without a server: settling it records the call.
type fakeMsg struct {
	subject string
	reply   string
	header  nats.Header
	data    []byte
	meta    natsjs.MsgMetadata
	acks    int
}

func (m *fakeMsg) Metadata() (*natsjs.MsgMetadata, error) { md := m.meta; return &md, nil }
func (m *fakeMsg) Data() []byte                           { return m.data }
func (m *fakeMsg) Headers() nats.Header                   { return m.header }
func (m *fakeMsg) Subject() string                        { return m.subject }
func (m *fakeMsg) Reply() string                          { return m.reply }
func (m *fakeMsg) Ack() error                             { m.acks++; return nil }
func (m *fakeMsg) DoubleAck(context.Context) error        { m.acks++; return nil }
func (m *fakeMsg) Nak() error                             { return nil }
func (m *fakeMsg) NakWithDelay(time.Duration) error       { return nil }
func (m *fakeMsg) InProgress() error                      { return nil }
func (m *fakeMsg) Term() error                            { return nil }
func (m *fakeMsg) TermWithReason(string) error            { return nil }

// deliveryFixture is one partition consumer of a one-partition topic with a do-nothing
// handler, and a message as the Bus publishes it.
func deliveryFixture() (*partConsumer, *fakeMsg) {
	s := &subscription{bus: &Bus{}, group: "g", stopCh: make(chan struct{}), ctx: context.Background()}
	s.opts, _ = jetbus.ApplySubscribeOptions()
	s.handler = jetbus.ChainHandler(func(ctx context.Context, d *jetbus.Delivery) error {
		if d.DecodeErr != nil {
			return jetbus.Permanent(d.DecodeErr)
		}
		return nil
	})
	pc := &partConsumer{sub: s, topic: "orders", stream: "orders", partition: 0, name: "g_p0"}
	e := &jetbus.Event{ID: newEventID(time.Now()), Topic: "orders", TS: time.Now(), Payload: []byte(`{"order":12345,"customer":"c-987","amount":42.5,"items":["a","b","c"]}`)}
	wire := encode(e, "orders.p0")
	m := &fakeMsg{subject: wire.Subject, reply: "$JS.ACK._.acchash.orders.g_p0.1.7.7.1700000000000000000.0.token", header: wire.Header, data: wire.Data}
	m.meta = natsjs.MsgMetadata{Sequence: natsjs.SequencePair{Stream: 7, Consumer: 7}, NumDelivered: 1, Stream: "orders", Consumer: "g_p0", Timestamp: time.Now()}
	return pc, m
}

// orderedDelivery is what an ordered pull does with a message before handling it: its
// delivery's allocation, with the metadata read from the ack subject.
func orderedDelivery(m *fakeMsg) *deliveryEvent {
	de := new(deliveryEvent)
	if err := parseAckReply(m.reply, &de.meta); err != nil {
		panic(err)
	}
	return de
}

// BenchmarkDeliveryPath is the Bus's own work per delivery, without the server: read the
// metadata, decode the message into an Event, run the handler chain (a do-nothing handler)
// and settle it.
func BenchmarkDeliveryPath(b *testing.B) {
	pc, m := deliveryFixture()
	b.ReportAllocs()
	for b.Loop() {
		pc.handle(m, orderedDelivery(m))
	}
}

// BenchmarkDeliveryPathTraced is BenchmarkDeliveryPath with tracing on: the event carries a
// sampled traceparent and the Bus an SDK provider sampling everything, its batch span
// processor exporting to nowhere. The difference is a consumer span's cost.
func BenchmarkDeliveryPathTraced(b *testing.B) {
	pc, m := deliveryFixture()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	pc.sub.bus.tracer = spans.Tracer(tp, scope)
	pc.span = newProcessSpan(pc.topic, pc.sub.group, pc.partition)
	m.header.Set(jetbus.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	b.ReportAllocs()
	for b.Loop() {
		pc.handle(m, orderedDelivery(m))
	}
}

type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// TestDeliveryAllocations guards the delivery path's allocations (see "Cost per delivery" in
// the package doc): one allocation per delivery, the Delivery and its Event together, for an
// event without custom headers, tags or caused-by.
func TestDeliveryAllocations(t *testing.T) {
	pc, m := deliveryFixture()
	allocs := testing.AllocsPerRun(1000, func() { pc.handle(m, orderedDelivery(m)) })
	if allocs > 1 {
		t.Errorf("%.1f allocations per delivery, want 1", allocs)
	}
	if m.acks == 0 {
		t.Error("the fixture's deliveries were not acknowledged")
	}
}

// FuzzValidJSON checks that validJSON accepts exactly what encoding/json accepts.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `"a\u0000"`, `1e5`, `-0.1`, `{"a":}`, "\"\x01\"", `01`, `1.`,
		`"\ud800"`, "\"\xff\"", ` true `, `nul`, "\"\x10\\b\"", `{"a":1,}`, `[1,]`, "\t\n1\r", `1 2`, `-`,
		`0e`, `"\u12"`, "\"\xed\xa0\x80\"", `null`, `{"a":[{"b":null}]}`, ``} {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat("[", jetbus.MaxJSONDepth) + strings.Repeat("]", jetbus.MaxJSONDepth)))
	f.Add([]byte(strings.Repeat("[", jetbus.MaxJSONDepth+1) + strings.Repeat("]", jetbus.MaxJSONDepth+1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		// encoding/json accepts 10,000 levels; jetbus at most MaxJSONDepth.
		if got, want := validJSON(b), json.Valid(b) && jsonenc.WithinDepth(b, jetbus.MaxJSONDepth); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}
