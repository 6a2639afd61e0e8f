package ingress_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestRequestReply: a raw client's request is stored, partitioned by its key, and answered
// with the event's ID, partition and sequence once JetStream acknowledged it; the stored
// message carries the wire contract's headers the client sent.
func TestRequestReply(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 4})
	e.run(ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)

	ts := time.Now().Add(-time.Hour).UnixMilli()
	r := decodeOK(t, request(t, nc, "in.orders", []byte(`{"id":42,"total":9.5}`),
		"x-key", "customer-7", "x-ts", strconv.FormatInt(ts, 10), "x-sid", "boot-1",
		"x-caused-by", "a,b", "x-tags", "web,eu", "x-note", "kept", "content-type", "text/plain", "traceparent", "00-1"))
	assert.Equal(t, "orders", r.Topic)
	assert.Equal(t, jetbus.PartitionOf("customer-7", 4), r.Partition)
	assert.False(t, r.Duplicate)
	id, err := uuid.Parse(r.ID)
	require.NoError(t, err, "a fresh event ID")
	assert.Equal(t, uuid.Version(7), id.Version())

	stored := e.stored("orders")
	require.Len(t, stored, 1)
	m := stored[0]
	assert.Equal(t, r.Seq, m.Sequence)
	assert.Equal(t, jetbus.PartitionSubject("orders", r.Partition), m.Subject)
	assert.JSONEq(t, `{"id":42,"total":9.5}`, string(m.Data))
	for k, v := range map[string]string{
		jetbus.HeaderMsgID: r.ID, "x-key": "customer-7", "x-ts": strconv.FormatInt(ts, 10), "x-sid": "boot-1",
		"x-caused-by": "a,b", "x-tags": "web,eu", "x-note": "kept", "content-type": jetbus.ContentTypeJSON,
	} {
		assert.Equal(t, v, m.Header.Get(k), "header %s", k)
	}
	assert.Empty(t, m.Header.Get("traceparent"), "a malformed traceparent is dropped, not refused")

	// Without a key the event is partitioned by its ID, and the client's ID is the event's.
	r = decodeOK(t, request(t, nc, "in.orders", []byte(`null`), jetbus.HeaderMsgID, "client-id-1"))
	assert.Equal(t, "client-id-1", r.ID)
	assert.Equal(t, jetbus.PartitionOf("client-id-1", 4), r.Partition)
	assert.Equal(t, uint64(2), r.Seq)
}

// TestRetriedRequestStoredOnce: a client that sends the same request again (same
// Nats-Msg-Id), say after a timeout, gets the same event back, marked duplicate, and the topic
// holds it once.
func TestRetriedRequestStoredOnce(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 2})
	g := e.run(ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)

	first := decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":1}`), jetbus.HeaderMsgID, "order-1", "x-key", "k"))
	again := decodeOK(t, request(t, nc, "in.orders", []byte(`{"n":1}`), jetbus.HeaderMsgID, "order-1", "x-key", "k"))
	assert.False(t, first.Duplicate)
	assert.True(t, again.Duplicate)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, first.Seq, again.Seq, "the stored event's sequence")
	assert.Equal(t, first.Partition, again.Partition)
	assert.Equal(t, uint64(1), e.count("orders"))
	st := g.Stats()
	assert.Equal(t, uint64(2), st.Accepted)
	assert.Equal(t, uint64(1), st.Duplicates)
}

// TestErrorCodes: every refusal a request can meet, with its code, its HTTP-like status in
// Nats-Service-Error-Code, the code first in Nats-Service-Error, and its details. Nothing
// refused is stored.
func TestErrorCodes(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"}, jbjs.TopicConfig{Name: "refunds"}, jbjs.TopicConfig{Name: "full"})
	_, err := e.reg.Register(context.Background(), "orders",
		[]byte(`{"type":"object","required":["id"],"properties":{"id":{"type":"integer"},"total":{"type":"number","minimum":0}}}`))
	require.NoError(t, err)
	fillUp(t, e, "full")
	g := e.run(ingress.Config{Allow: []string{"orders", "ghost", "full"}, MaxMessageSize: 1024})
	nc := client(t, e.url)
	valid := []byte(`{"id":1}`)

	cases := []struct {
		name    string
		subject string
		body    []byte
		headers []string
		code    string
		status  string
		details map[string]any // expected subset
		message string         // expected substring
	}{
		{"topic not a name", "in.Orders", valid, nil, "bad_topic", "400", map[string]any{"topic": "Orders"}, "must match"},
		{"partition subject", "in.orders.p0", valid, nil, "bad_topic", "400", nil, "partition token"},
		{"dead-letter prefix", "in.dlq.orders", valid, nil, "bad_topic", "400", nil, "reserved prefix"},
		{"ingress prefix", "in.in.orders", valid, nil, "bad_topic", "400", nil, "reserved prefix"},
		{"allowed topic without a stream", "in.ghost", valid, nil, "bad_topic", "400", nil, "topic not found"},
		{"topic not open to ingress", "in.refunds", valid, nil, "not_allowed", "403", map[string]any{"topic": "refunds"}, "not open to ingress"},
		{"not JSON", "in.orders", []byte(`{"id":`), nil, "not_json", "400", nil, "not valid JSON"},
		{"empty body", "in.orders", nil, nil, "not_json", "400", nil, "not valid JSON"},
		{"two JSON values", "in.orders", []byte(`{} {}`), nil, "not_json", "400", nil, "not valid JSON"},
		{"too large", "in.orders", []byte(`{"id":1,"pad":"` + strings.Repeat("x", 1100) + `"}`), nil, "too_large", "413",
			map[string]any{"max": float64(1024)}, "exceeds the limit of 1024"},
		{"headers too large", "in.orders", valid, []string{"x-note", strings.Repeat("h", 65000)}, "too_large", "413",
			map[string]any{"max": float64(ingress.MaxHeaderBytes)}, "headers of"},
		{"schema", "in.orders", []byte(`{"id":"one","total":-1}`), nil, "schema", "422", nil, "does not validate"},
		{"schema version not live", "in.orders", valid, []string{"x-schema-version", "9"}, "schema", "422", nil, "not a live version"},
		{"dead-letter header", "in.orders", valid, []string{"x-dlq-reason", "replayed"}, "reserved_header", "400", map[string]any{"header": "x-dlq-reason"}, "reserved"},
		{"jetbus header", "in.orders", valid, []string{"x-jetbus-group", "billing"}, "reserved_header", "400", map[string]any{"header": "x-jetbus-group"}, "reserved"},
		{"upper-case custom header", "in.orders", valid, []string{"X-Key", "k"}, "reserved_header", "400", map[string]any{"header": "X-Key"}, "must match"},
		{"custom header name", "in.orders", valid, []string{"x-Bad_Name", "v"}, "reserved_header", "400", nil, "must match"},
		{"JetStream directive", "in.orders", valid, []string{"Nats-Expected-Stream", "orders"}, "reserved_header", "400",
			map[string]any{"header": "Nats-Expected-Stream"}, "directives"},
		{"lower-case message ID", "in.orders", valid, []string{"nats-msg-id", "x"}, "reserved_header", "400", nil, "directives"},
		{"control character in the key", "in.orders", valid, []string{"x-key", "a\x01b"}, "reserved_header", "400", map[string]any{"header": "x-key"}, "control character"},
		{"control character in a value", "in.orders", valid, []string{"x-note", "a\tb"}, "reserved_header", "400", nil, "control character"},
		{"control character in the ID", "in.orders", valid, []string{jetbus.HeaderMsgID, "id\x7f"}, "reserved_header", "400", nil, "control character"},
		{"ID too long", "in.orders", valid, []string{jetbus.HeaderMsgID, strings.Repeat("i", 1025)}, "reserved_header", "400", nil, "longer than 1024"},
		{"key too long", "in.orders", valid, []string{"x-key", strings.Repeat("k", 1025)}, "reserved_header", "400", nil, "at most 1024"},
		{"time not Unix ms", "in.orders", valid, []string{"x-ts", "yesterday"}, "reserved_header", "400", map[string]any{"header": "x-ts"}, "Unix milliseconds"},
		{"time years ahead", "in.orders", valid, []string{"x-ts", strconv.FormatInt(time.Now().AddDate(10, 0, 0).UnixMilli(), 10)}, "reserved_header", "400",
			map[string]any{"header": "x-ts"}, "from the bridge's clock"},
		{"time long past", "in.orders", valid, []string{"x-ts", "1"}, "reserved_header", "400", map[string]any{"header": "x-ts"}, "from the bridge's clock"},
		{"empty tag", "in.orders", valid, []string{"x-tags", "a,,b"}, "reserved_header", "400", nil, "empty element"},
		{"key twice", "in.orders", valid, []string{"x-key", "a", "x-key", "b"}, "reserved_header", "400", nil, "given 2 times"},
		{"a DLQ replay's ID", "in.orders", valid, []string{jetbus.HeaderMsgID, "replay:ORDERS:1:billing"}, "reserved_header", "400",
			map[string]any{"header": jetbus.HeaderMsgID}, "jetbus's own"},
		{"a dead letter's ID", "in.orders", valid, []string{jetbus.HeaderMsgID, "dlq:ORDERS:7:billing"}, "reserved_header", "400", nil, "jetbus's own"},
		{"nested too deep", "in.orders", []byte(strings.Repeat("[", jetbus.MaxJSONDepth+1) + strings.Repeat("]", jetbus.MaxJSONDepth+1)),
			nil, "not_json", "400", map[string]any{"max_depth": float64(jetbus.MaxJSONDepth)}, "deeper than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := request(t, nc, tc.subject, tc.body, tc.headers...)
			r := decodeErr(t, m)
			assert.Equal(t, tc.code, r.Error.Code)
			assert.Contains(t, r.Error.Message, tc.message)
			assert.Equal(t, tc.status, m.Header.Get("Nats-Service-Error-Code"))
			assert.True(t, strings.HasPrefix(m.Header.Get("Nats-Service-Error"), tc.code+": "), m.Header.Get("Nats-Service-Error"))
			assert.NotContains(t, m.Header.Get("Nats-Service-Error"), tc.code+": "+tc.code+": ", "the code once")
			require.NotNil(t, r.Error.Details, "details is always an object")
			for k, v := range tc.details {
				assert.Equal(t, v, r.Error.Details[k], "details.%s", k)
			}
		})
	}
	t.Run("schema details list every violation", func(t *testing.T) {
		r := decodeErr(t, request(t, nc, "in.orders", []byte(`{"id":"one","total":-1}`)))
		vs, ok := r.Error.Details["violations"].([]any)
		require.True(t, ok, "%v", r.Error.Details)
		var pointers []string
		for _, v := range vs {
			pointers = append(pointers, v.(map[string]any)["pointer"].(string))
		}
		assert.ElementsMatch(t, []string{"/id", "/total"}, pointers)
		assert.Equal(t, float64(1), r.Error.Details["version"])
	})
	t.Run("unavailable: the stream refuses the event", func(t *testing.T) {
		m := request(t, nc, "in.full", []byte(`{}`), jetbus.HeaderMsgID, "retry-me")
		r := decodeErr(t, m)
		assert.Equal(t, "unavailable", r.Error.Code)
		assert.Equal(t, "503", m.Header.Get("Nats-Service-Error-Code"))
		assert.Contains(t, r.Error.Message, "may be stored")
		assert.Equal(t, "retry-me", r.Error.Details["id"], "the ID to retry with")
		require.Eventually(t, func() bool { return !g.Stats().JetStreamUnavailable }, wait, 5*time.Millisecond,
			"the prober finds the stream and closes the breaker")
		decodeOK(t, request(t, nc, "in.orders", valid))
	})
	assert.Equal(t, uint64(1), e.count("orders"), "nothing refused is stored")
}

// fillUp makes topic's stream refuse every further event: at most one message, new ones
// discarded (what a full stream with discard: new does).
func fillUp(t *testing.T, e *env, topic string) {
	t.Helper()
	ctx := context.Background()
	_, err := e.bus.Publish(ctx, topic, map[string]int{"n": 0})
	require.NoError(t, err)
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = 1
	cfg.Discard = 1 // natsjs.DiscardNew
	_, err = e.js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// unfill lifts fillUp's limit.
func unfill(t *testing.T, e *env, topic string) {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = -1
	_, err = e.js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}
