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
// event a client sends through ingress is published under a producer span of service
// jetbus-bridge, carried on the event, and the batch that holds it is exported when the
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
	reply, err := nc.Request("in.orders", []byte(`{"id":1}`), 10*time.Second)
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
	var publish *otlptest.Span
	for i, sp := range got {
		assert.Equal(t, "jetbus-bridge", sp.Service)
		if sp.Name == "publish orders" {
			publish = &got[i]
		}
	}
	require.NotNil(t, publish, "spans exported on stop: %v", got)
	assert.Equal(t, traceparent[3:35], publish.TraceID)
	assert.Equal(t, traceparent[36:52], publish.SpanID)
	assert.Equal(t, "nats", publish.Attributes["messaging.system"])
}
