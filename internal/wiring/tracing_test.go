package wiring_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/tracing/otlptest"
	"github.com/jetbus/jetbus/internal/wiring"
)

// TestBridgeTraces runs a bridge with tracing on against an in-process OTLP receiver: the
// event a client sends through ingress with its traceparent is taken under an ingress server
// span of service jetbus-bridge continuing the client's trace, published under a producer
// span, its child, carried on the event, and the batch that holds them is exported when the
// bridge stops (the batch delay is longer than the test: only the flush on stop sends it).
func TestBridgeTraces(t *testing.T) {
	s := embeddedtest.NATS(t)
	r := otlptest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	bridge := start(t, wiring.Bridge, t.TempDir(), `
topics: [{name: orders}]
ingress: {allow: [orders]}
tracing: {enabled: true, endpoint: "`+r.HTTPEndpoint()+`"}
`, "JETBUS_NATS_URLS="+s.ClientURL())

	nc := embeddedtest.Connect(t, s.ClientURL())
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := nats.NewMsg("in.orders")
	req.Data = []byte(`{"id":1}`)
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	reply, err := nc.RequestMsg(req, 10*time.Second)
	require.NoError(t, err)
	require.Empty(t, reply.Header.Get("Nats-Service-Error"), string(reply.Data))
	js, err := nc.JetStream()
	require.NoError(t, err)
	msg, err := js.GetLastMsg("orders", "orders.p0")
	require.NoError(t, err)
	traceparent := nats.Header(msg.Header).Get("traceparent")
	require.NotEmpty(t, traceparent, "the event carries the producer span")
	assert.Empty(t, r.Spans(), "nothing exported before the flush")

	require.NoError(t, bridge.stop())
	got := r.Spans()
	var publish, in *otlptest.Span
	for i, sp := range got {
		assert.Equal(t, "jetbus-bridge", sp.Service)
		switch sp.Name {
		case "publish orders":
			publish = &got[i]
		case "ingress orders":
			in = &got[i]
		}
	}
	require.NotNil(t, publish, "spans exported on stop: %v", got)
	require.NotNil(t, in, "spans exported on stop: %v", got)
	assert.Equal(t, clientTrace, traceparent[3:35], "the client's trace")
	assert.Equal(t, traceparent[3:35], publish.TraceID)
	assert.Equal(t, traceparent[36:52], publish.SpanID)
	assert.Equal(t, "nats", publish.Attributes["messaging.system"])
	assert.Equal(t, in.SpanID, publish.ParentSpanID)
	assert.Equal(t, clientSpan, in.ParentSpanID)
	assert.Equal(t, clientTrace, in.TraceID)
}
