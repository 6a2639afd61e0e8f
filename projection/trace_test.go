package projection_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
)

// tracedEnv is env with a Bus and a DLQ tracing with tp.
func tracedEnv(t *testing.T, topic string, tp trace.TracerProvider) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	e := &env{t: t, url: s.ClientURL(), topic: topic, parts: 1, last: map[int]uint64{}}
	e.bus = embeddedtest.Bus(t, e.url, jetstream.WithTracerProvider(tp))
	require.NoError(t, e.bus.EnsureTopic(t.Context(), jetstream.TopicConfig{Name: topic}))
	q, err := dlq.Open(t.Context(), e.bus.JetStream(), dlq.Config{}, dlq.WithTracerProvider(tp))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	e.q = q
	e.db = embeddedtest.Mongo(t)
	return e
}

func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// rawPublish publishes body with key to e's topic as a raw nats.go client, with traceparent
// when it is not empty, and records it for waitLag.
func (e *env) rawPublish(nc *nats.Conn, key, body, traceparent string) {
	e.t.Helper()
	m := nats.NewMsg(jetbus.PartitionSubject(e.topic, 0))
	m.Data = []byte(body)
	m.Header.Set("x-key", key)
	if traceparent != "" {
		m.Header.Set("traceparent", traceparent)
	}
	js, err := nc.JetStream()
	require.NoError(e.t, err)
	ack, err := js.PublishMsg(m)
	require.NoError(e.t, err)
	e.mu.Lock()
	e.published(&jetbus.Event{Partition: 0, Seq: ack.Sequence})
	e.mu.Unlock()
}

func attrValue(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// From the wire: events of three traces (one not sampled, one sampled, one without a trace
// context) written in one batch make one write span, a child of the first sampled event's
// consumer span, linked to the consumer span of each; an event the view refuses is
// dead-lettered under its own consumer span.
func TestBatchWriteSpan(t *testing.T) {
	tp, sr := spanRecorder(t)
	e := tracedEnv(t, "orders", tp)
	nc := embeddedtest.Connect(t, e.url)
	const unsampled, sampled = "11111111111111111111111111111111", "22222222222222222222222222222222"
	e.rawPublish(nc, "a", `{"n":1}`, "00-"+unsampled+"-00f067aa0ba902b7-00")
	e.rawPublish(nc, "b", `{"n":2}`, "00-"+sampled+"-00f067aa0ba902b7-01")
	e.rawPublish(nc, "c", `{"n":3}`, "")
	e.rawPublish(nc, "d", `"not an object"`, "00-"+sampled+"-00f067aa0ba902b8-01")

	cfg := e.config("orders-view")
	cfg.Linger = 300 * time.Millisecond // the four in one batch
	c := e.changelog(cfg, projection.WithTracerProvider(tp))
	start(t, c.Run)
	e.waitLag("orders-view", 30*time.Second)
	require.Len(t, e.letters(), 1)

	var process []sdktrace.ReadOnlySpan // the sampled ones, by event
	var write sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		process, write = nil, nil
		for _, s := range sr.Ended() {
			switch s.Name() {
			case "process orders":
				process = append(process, s)
			case "projection write orders-view":
				write = s
			}
		}
		return write != nil && len(process) == 3
	}, 20*time.Second, 10*time.Millisecond, "three sampled process spans and a write span")
	assert.Equal(t, trace.SpanKindClient, write.SpanKind())
	assert.Equal(t, "mongodb", attrValue(write, "db.system.name").AsString())
	assert.Equal(t, "view", attrValue(write, "db.collection.name").AsString())
	assert.Equal(t, "bulkWrite", attrValue(write, "db.operation.name").AsString())
	assert.Equal(t, int64(4), attrValue(write, "messaging.batch.message_count").AsInt64())
	assert.Equal(t, int64(1), attrValue(write, "jetbus.attempt").AsInt64())
	require.Len(t, write.Links(), 4, "a link to each event's span")
	assert.Equal(t, unsampled, write.Links()[3].SpanContext.TraceID().String(), "the sampled ones first")
	assert.False(t, write.Links()[3].SpanContext.IsSampled())
	var bProcess, dProcess sdktrace.ReadOnlySpan
	for _, p := range process {
		if p.Parent().SpanID().String() == "00f067aa0ba902b7" && p.SpanContext().TraceID().String() == sampled {
			bProcess = p
		}
		if p.Parent().SpanID().String() == "00f067aa0ba902b8" {
			dProcess = p
		}
	}
	require.NotNil(t, bProcess)
	require.NotNil(t, dProcess)
	assert.Equal(t, bProcess.SpanContext().SpanID(), write.Parent().SpanID(), "the first sampled event's span is the parent")
	assert.Equal(t, bProcess.SpanContext(), write.Links()[0].SpanContext)

	dead := sr.Ended()
	var letter sdktrace.ReadOnlySpan
	for _, s := range dead {
		if s.Name() == "dead-letter orders" {
			letter = s
		}
	}
	require.NotNil(t, letter)
	assert.Equal(t, dProcess.SpanContext().SpanID(), letter.Parent().SpanID(), "dead-lettered in its own trace")
	assert.Equal(t, dlq.ReasonProjection, attrValue(letter, "jetbus.dlq.reason").AsString())
}

// A batch of more events than a span keeps links for: the write links to 128, the sampled
// events' first; the sampled ones beyond are linked from "projection links" children, the
// unsampled ones beyond are counted.
func TestBatchWriteSpanLinksCapped(t *testing.T) {
	tp, sr := spanRecorder(t)
	e := tracedEnv(t, "orders", tp)
	nc := embeddedtest.Connect(t, e.url)
	const n = 400
	sampled := 0
	for i := range n {
		flags := "00"
		if i%2 == 1 { // every other one, interleaved
			flags = "01"
			sampled++
		}
		e.rawPublish(nc, strconv.Itoa(i), fmt.Sprintf(`{"n":%d}`, i), fmt.Sprintf("00-%032x-00f067aa0ba902b7-%s", i+1, flags))
	}
	cfg := e.config("orders-view")
	cfg.Linger = time.Second
	cfg.BatchSize = 500
	c := e.changelog(cfg, projection.WithTracerProvider(tp))
	start(t, c.Run)
	e.waitLag("orders-view", 30*time.Second)
	var writes, more []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		writes, more = writes[:0], more[:0]
		events := 0
		for _, s := range sr.Ended() {
			switch s.Name() {
			case "projection write orders-view":
				writes = append(writes, s)
				events += int(attrValue(s, "messaging.batch.message_count").AsInt64())
			case "projection links orders-view":
				more = append(more, s)
			}
		}
		return events == n
	}, 20*time.Second, 10*time.Millisecond)
	linked := map[string]bool{} // the sampled events linked, by trace ID
	for _, s := range slices.Concat(writes, more) {
		for _, l := range s.Links() {
			if l.SpanContext.IsSampled() {
				linked[l.SpanContext.TraceID().String()] = true
			}
		}
	}
	assert.Len(t, linked, sampled, "every sampled event linked from its batch's write")
	big := false
	for _, w := range writes {
		size := int(attrValue(w, "messaging.batch.message_count").AsInt64())
		half := size / 2 // sampled, about
		assert.LessOrEqual(t, len(w.Links()), 128)
		if size > 2*128 {
			big = true
			assert.Len(t, w.Links(), 128)
			for _, l := range w.Links() {
				assert.True(t, l.SpanContext.IsSampled(), "the sampled events' links first")
			}
			assert.InDelta(t, size-half, attrValue(w, "jetbus.links_dropped").AsInt64(), 1, "the unsampled ones counted")
		}
	}
	assert.True(t, big, "a batch of more than 256 events")
	for _, m := range more {
		assert.Equal(t, trace.SpanKindInternal, m.SpanKind())
		assert.True(t, slices.ContainsFunc(writes, func(w sdktrace.ReadOnlySpan) bool { return w.SpanContext().SpanID() == m.Parent().SpanID() }),
			"a child of a write span")
	}
	assert.NotEmpty(t, more)
}

// A transactional projection: a write span per commit, and the handler's ctx carries its own
// event's span, so that what it does for the event (an outbox document) follows the event.
func TestTransactionalWriteSpan(t *testing.T) {
	tp, sr := spanRecorder(t)
	e := tracedEnv(t, "orders", tp)
	nc := embeddedtest.Connect(t, e.url)
	const first, second = "11111111111111111111111111111111", "22222222222222222222222222222222"
	e.rawPublish(nc, "a", `{"n":1}`, "00-"+first+"-00f067aa0ba902b7-01")
	e.rawPublish(nc, "b", `{"n":2}`, "00-"+second+"-00f067aa0ba902b7-01")
	seen := make(chan string, 2)
	cfg := e.config("orders-tx")
	cfg.Collection = ""
	cfg.Linger = 300 * time.Millisecond
	p, err := projection.NewTransactional(e.bus, e.db.Client(), e.q, func(ctx context.Context, d *jetbus.Delivery) error {
		seen <- trace.SpanContextFromContext(ctx).TraceID().String()
		return nil
	}, cfg, projection.WithTracerProvider(tp))
	require.NoError(t, err)
	start(t, p.Run)
	e.waitLag("orders-tx", 30*time.Second)
	assert.Equal(t, first, <-seen)
	assert.Equal(t, second, <-seen)
	var write sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range sr.Ended() {
			if s.Name() == "projection write orders-tx" {
				write = s
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, "commitTransaction", attrValue(write, "db.operation.name").AsString())
	assert.Equal(t, first, write.SpanContext().TraceID().String())
	assert.Len(t, write.Links(), 2)
}
