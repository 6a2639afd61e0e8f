package changefeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// headersByID reads topic's stream and returns each message's headers by event ID.
func headersByID(t *testing.T, js natsjs.JetStream, topic string) map[string]nats.Header {
	t.Helper()
	s, err := js.Stream(t.Context(), jetbus.StreamName(topic))
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	out := map[string]nats.Header{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		out[m.Header.Get(jetbus.HeaderMsgID)] = m.Header
	}
	return out
}

// The outbox carries a trace context from the application's transaction to the published
// event: AppendOutbox writes ctx's span (or WithTraceContext's), the drainer's publish span
// is its child, and the event continues the trace. What is not a trace context is left out,
// never an error.
func TestOutboxTraceContext(t *testing.T) {
	e := newEnv(t, "ob.orders")
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.bus = embeddedtest.Bus(t, e.nats.ClientURL(), jetstream.WithTracerProvider(tp))
	outbox := e.db.Collection("outbox")

	const traceA, spanA = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const traceB = "22222222222222222222222222222222"
	app := trace.NewSpanContext(trace.SpanContextConfig{TraceID: mustTraceID(traceA), SpanID: mustSpanID(spanA), TraceFlags: trace.FlagsSampled})
	var fromCtx, fromOption, garbage *jetbus.Event
	require.NoError(t, inTxn(t, e.db.Client(), func(ctx context.Context) error {
		var err error
		if fromCtx, err = changefeed.AppendOutbox(trace.ContextWithSpanContext(ctx, app), outbox, "ob.orders", 1,
			jetbus.WithTraceContext("00-"+traceB+"-"+spanA+"-01", "")); err != nil { // ctx's span wins
			return err
		}
		if fromOption, err = changefeed.AppendOutbox(ctx, outbox, "ob.orders", 2, jetbus.WithTraceContext("00-"+traceB+"-"+spanA+"-01", "rojo=1")); err != nil {
			return err
		}
		garbage, err = changefeed.AppendOutbox(ctx, outbox, "ob.orders", 3, jetbus.WithTraceContext("00-nope", "rojo=1"))
		return err
	}))
	assert.Equal(t, "00-"+traceA+"-"+spanA+"-01", fromCtx.TraceParent)
	assert.Equal(t, "rojo=1", fromOption.TraceState)
	assert.Empty(t, garbage.TraceParent)
	var doc bson.M
	require.NoError(t, outbox.FindOne(t.Context(), bson.D{{Key: "_id", Value: fromOption.ID}}).Decode(&doc))
	assert.Equal(t, "00-"+traceB+"-"+spanA+"-01", doc["traceparent"])
	assert.Equal(t, "rojo=1", doc["tracestate"])
	var other bson.M
	require.NoError(t, outbox.FindOne(t.Context(), bson.D{{Key: "_id", Value: garbage.ID}}).Decode(&other))
	assert.NotContains(t, other, "traceparent")
	// Written by other means: a traceparent that is not a string is no trace context.
	_, err := outbox.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "raw-1"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: "4"},
		{Key: "traceparent", Value: 42}})
	require.NoError(t, err)
	// One that cannot be published: its dead letter keeps its trace context.
	_, err = outbox.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "raw-2"}, {Key: "payload", Value: "5"},
		{Key: "traceparent", Value: "00-" + traceB + "-" + spanA + "-01"}})
	require.NoError(t, err)

	e.startDrainer(changefeed.OutboxConfig{Name: "ob"})
	e.waitEvents("ob.orders", 4)
	hs := headersByID(t, e.bus.JetStream(), "ob.orders")
	for id, want := range map[string]string{fromCtx.ID: traceA, fromOption.ID: traceB, garbage.ID: "", "raw-1": ""} {
		got := jetbus.TraceIDOf(hs[id].Get("traceparent"))
		if want == "" {
			assert.NotContains(t, []string{traceA, traceB}, got, "%s: a trace of the drainer's own", id)
			continue
		}
		assert.Equal(t, want, got, id)
	}
	assert.Equal(t, "rojo=1", hs[fromOption.ID].Get("tracestate"))
	var letters []*dlq.Letter
	require.Eventually(t, func() bool {
		letters, err = e.dlq.List(t.Context(), dlq.Filter{}, 0)
		return err == nil && len(letters) == 1
	}, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, "00-"+traceB+"-"+spanA+"-01", letters[0].Header.Get("traceparent"))

	var publishes []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		publishes = publishes[:0]
		for _, s := range sr.Ended() {
			if s.Name() == "publish ob.orders" {
				publishes = append(publishes, s)
			}
		}
		return len(publishes) == 4
	}, 20*time.Second, 10*time.Millisecond, "a publish span per document")
	for _, s := range publishes {
		if s.SpanContext().TraceID().String() == traceA {
			assert.Equal(t, spanA, s.Parent().SpanID().String(), "a child of the application's span")
		}
	}
}

func mustTraceID(s string) trace.TraceID {
	id, err := trace.TraceIDFromHex(s)
	if err != nil {
		panic(err)
	}
	return id
}

func mustSpanID(s string) trace.SpanID {
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		panic(err)
	}
	return id
}
