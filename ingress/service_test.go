package ingress_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestServiceDiscoveryAndMetrics: ingress is a NATS micro service any NATS tool finds
// ($SRV.PING, $SRV.INFO, $SRV.STATS, as `nats micro` does), and its counters agree with its
// Prometheus metrics.
func TestServiceDiscoveryAndMetrics(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	g := e.run(ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)

	decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":1}`)))
	decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":2}`)))
	decodeErr(t, request(t, nc, "in.nope", []byte(`{}`)))
	decodeErr(t, request(t, nc, "in.orders", []byte(`{`)))
	require.NoError(t, nc.Publish("in.orders", []byte(`{"n":`))) // fire-and-forget: dead-lettered

	var ping struct{ Name, Type, Version string }
	resp, err := nc.Request("$SRV.PING.jetbus-ingress", nil, wait)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(resp.Data, &ping))
	assert.Equal(t, ingress.ServiceName, ping.Name)
	assert.Equal(t, "io.nats.micro.v1.ping_response", ping.Type)
	assert.Equal(t, ingress.ServiceVersion, ping.Version)

	var info struct {
		Endpoints []struct {
			Name       string            `json:"name"`
			Subject    string            `json:"subject"`
			QueueGroup string            `json:"queue_group"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"endpoints"`
	}
	resp, err = nc.Request("$SRV.INFO.jetbus-ingress", nil, wait)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(resp.Data, &info))
	require.Len(t, info.Endpoints, 1)
	ep := info.Endpoints[0]
	assert.Equal(t, ingress.EndpointName, ep.Name)
	assert.Equal(t, "in.>", ep.Subject)
	assert.Equal(t, "jetbus-ingress", ep.QueueGroup)
	assert.Equal(t, "orders", ep.Metadata["allow"])

	var stats struct {
		Endpoints []struct {
			NumRequests int           `json:"num_requests"`
			NumErrors   int           `json:"num_errors"`
			LastError   string        `json:"last_error"`
			Data        ingress.Stats `json:"data"`
		} `json:"endpoints"`
	}
	// The micro service counts a request once its handler returned, after the reply went
	// out: ask until the last one is counted.
	require.Eventually(t, func() bool {
		resp, err := nc.Request("$SRV.STATS.jetbus-ingress", nil, wait)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(resp.Data, &stats))
		require.Len(t, stats.Endpoints, 1)
		return stats.Endpoints[0].NumRequests == 5 && stats.Endpoints[0].NumErrors == 3
	}, wait, 10*time.Millisecond, "five requests counted, three refused: %+v", stats)
	st := stats.Endpoints[0]
	assert.Equal(t, uint64(2), st.Data.Accepted)
	assert.Equal(t, map[ingress.Code]uint64{ingress.CodeNotAllowed: 1, ingress.CodeNotJSON: 2}, st.Data.Rejected)
	assert.Equal(t, "400:not_json", st.LastError, "the last refusal's status and code, none of its text")
	assert.Equal(t, g.Stats(), st.Data)

	assert.Equal(t, 2.0, metricValue(t, g, "ingress_accepted_total", "topic", "orders"))
	assert.Equal(t, 2.0, metricValue(t, g, "ingress_publish_duration_ms", "topic", "orders"))
	assert.Equal(t, 1.0, metricValue(t, g, "ingress_rejected_total", "topic", "_other", "code", "not_allowed"),
		"topics that are not allowed share one label")
	assert.Equal(t, 2.0, metricValue(t, g, "ingress_rejected_total", "topic", "orders", "code", "not_json"))
	assert.Zero(t, metricValue(t, g, "ingress_inflight"))
	assert.Zero(t, metricValue(t, g, "ingress_jetstream_unavailable"))

	st2, err := g.Status(t.Context())
	require.NoError(t, err)
	assert.Equal(t, g.Stats(), st2)
	require.NoError(t, g.stop(t))
	assert.Error(t, g.Ready(t.Context()), "not ready once stopped")
	_, err = nc.Request("$SRV.PING.jetbus-ingress", nil, 200*time.Millisecond)
	assert.Error(t, err, "the service is gone")
}

// TestVerbsAnswerOnlyInboxes: a discovery request whose reply subject is a stream's or a KV
// bucket's is not answered there (it would be the bridge writing the service's JSON into
// them); it is counted. Discovery on an inbox still works.
func TestVerbsAnswerOnlyInboxes(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	g := e.run(ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)
	var ping struct{ ID string }
	resp, err := nc.Request("$SRV.PING.jetbus-ingress", nil, wait)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(resp.Data, &ping))
	hostile := []*nats.Msg{
		{Subject: "$SRV.PING", Reply: "orders.p0"},
		{Subject: "$SRV.INFO.jetbus-ingress", Reply: "orders.p0"},
		{Subject: "$SRV.STATS.jetbus-ingress." + ping.ID, Reply: "$KV.jetbus_dlq_replays.x"},
		{Subject: "$SRV.PING.jetbus-ingress", Reply: ""},
	}
	for _, m := range hostile {
		require.NoError(t, nc.PublishMsg(m))
	}
	require.NoError(t, nc.Flush())
	require.True(t, embeddedtest.Poll(wait, 5*time.Millisecond, func() bool {
		return metricValue(t, g, "ingress_verbs_refused_total") == float64(len(hostile))
	}), "every hostile verb is counted")
	assert.Zero(t, e.count("orders"), "nothing was written into the stream")
	_, err = e.js.KeyValue(t.Context(), "jetbus_dlq_replays")
	if err == nil {
		kv, _ := e.js.KeyValue(t.Context(), "jetbus_dlq_replays")
		_, err := kv.Get(t.Context(), "x")
		assert.Error(t, err, "nothing was written into KV")
	}
	resp, err = nc.Request("$SRV.INFO.jetbus-ingress."+ping.ID, nil, wait)
	require.NoError(t, err, "discovery on an inbox still works")
	assert.Contains(t, string(resp.Data), `"io.nats.micro.v1.info_response"`)
}
