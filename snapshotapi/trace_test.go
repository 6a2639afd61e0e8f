package snapshotapi_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// tracedAPI serves the orders view of a fresh database, tracing with tp (nil: not at all).
func tracedAPI(t *testing.T, tp trace.TracerProvider) *api {
	t.Helper()
	db := embeddedtest.Mongo(t)
	a := &api{t: t, db: db, reg: prometheus.NewRegistry(), noSpec: true}
	opts := []snapshotapi.Option{snapshotapi.WithLogger(embeddedtest.Logger(t))}
	if tp != nil {
		opts = append(opts, snapshotapi.WithTracerProvider(tp))
	}
	var err error
	a.srv, err = snapshotapi.New(snapshotapi.Deps{Mongo: db.Client()},
		snapshotapi.Config{Views: []snapshotapi.View{ordersView(db.Name())}, CursorKey: testKey}, opts...)
	require.NoError(t, err)
	t.Cleanup(a.srv.StopHubs)
	a.http = httptest.NewServer(a.srv)
	t.Cleanup(a.http.Close)
	_, err = db.Collection("orders").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "k1"}, {Key: "status", Value: "open"}})
	require.NoError(t, err)
	_, err = db.Collection(snapshotapi.CheckpointsCollection).InsertOne(t.Context(),
		bson.D{{Key: "_id", Value: snapshotapi.CheckpointID("orders-view", "orders", 1)}, {Key: "seq", Value: int64(5)}})
	require.NoError(t, err)
	return a
}

func endedSpan(t *testing.T, sr *tracetest.SpanRecorder, name, traceID string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range sr.Ended() {
			if s.Name() == name && (traceID == "" || s.SpanContext().TraceID().String() == traceID) {
				found = s
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "a span %q", name)
	return found
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// Tracing on: a request continues the client's traceparent in a server span named by its
// route, an ?after= wait is its child, and the answer's traceresponse names the server span;
// a wait that runs out is an error on both.
func TestRequestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := tracedAPI(t, tp)

	const client, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := a.get("/v1/views/orders/k1?after=1:5", "traceparent", "00-"+client+"-"+parent+"-01", "tracestate", "rojo=1")
	require.Equal(t, 200, r.StatusCode, string(r.body))
	srv := endedSpan(t, sr, "GET /v1/views/{view}/{key}", client)
	assert.Equal(t, trace.SpanKindServer, srv.SpanKind())
	assert.Equal(t, parent, srv.Parent().SpanID().String())
	assert.Equal(t, "rojo=1", srv.SpanContext().TraceState().String())
	assert.Equal(t, "200", spanAttr(srv, "http.response.status_code"))
	assert.Equal(t, "/v1/views/{view}/{key}", spanAttr(srv, "http.route"))
	assert.Equal(t, "00-"+client+"-"+srv.SpanContext().SpanID().String()+"-01", r.Header.Get("traceresponse"))
	wait := endedSpan(t, sr, "await orders", client)
	assert.Equal(t, srv.SpanContext().SpanID(), wait.Parent().SpanID(), "the wait is the request's child")
	assert.Equal(t, "1:5", spanAttr(wait, "jetbus.after"))
	assert.Equal(t, codes.Unset, wait.Status().Code)

	const late = "22222222222222222222222222222222"
	r = a.get("/v1/views/orders?after=1:9&wait=20ms", "traceparent", "00-"+late+"-"+parent+"-01")
	require.Equal(t, 503, r.StatusCode, string(r.body))
	wait = endedSpan(t, sr, "await orders", late)
	assert.Equal(t, codes.Error, wait.Status().Code)
	assert.Equal(t, "not_applied", spanAttr(wait, "error.type"))
	srv = endedSpan(t, sr, "GET /v1/views/{view}", late)
	assert.Equal(t, codes.Error, srv.Status().Code)

	// No traceparent (or a malformed one): a trace of the request's own, still answered.
	r = a.get("/v1/views/orders/k1", "traceparent", "00-garbage")
	require.Equal(t, 200, r.StatusCode)
	id := r.Header.Get("traceresponse")[3:35]
	root := endedSpan(t, sr, "GET /v1/views/{view}/{key}", id)
	assert.False(t, root.Parent().IsValid())
	r = a.get("/nowhere")
	assert.Equal(t, 404, r.StatusCode)
	assert.NotEmpty(t, r.Header.Get("traceresponse"))
}

// A watch is one server span for its whole life, and its stream's headers carry the
// traceresponse.
func TestWatchSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := tracedAPI(t, tp)
	const client = "4bf92f3577b34da6a3ce929d0e0e4736"
	w := a.watch("/v1/views/orders?watch=true", "traceparent", "00-"+client+"-00f067aa0ba902b7-01")
	assert.Equal(t, client, w.resp.Header.Get("traceresponse")[3:35])
	require.Equal(t, "upsert", w.next().event)
	for _, s := range sr.Ended() {
		assert.NotEqual(t, "GET /v1/views/{view}", s.Name(), "not ended while the watch runs")
	}
	w.close()
	srv := endedSpan(t, sr, "GET /v1/views/{view}", client)
	assert.Equal(t, "00f067aa0ba902b7", srv.Parent().SpanID().String())
}

// Tracing off: no traceresponse.
func TestNoTraceResponseUntraced(t *testing.T) {
	a := tracedAPI(t, nil)
	r := a.get("/v1/views/orders/k1?after=1:5", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.Equal(t, 200, r.StatusCode)
	assert.Empty(t, r.Header.Get("traceresponse"))
}

// A traced API's document says so: every operation takes traceparent and tracestate, and
// every response (the error responses too) has the traceresponse header, whose answers
// validate against it; an untraced API's document does not mention them.
func TestOpenAPITraceContext(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := tracedAPI(t, tp)
	a.noSpec = false
	doc := a.spec()
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			var names []string
			for _, p := range op.Parameters {
				names = append(names, p.Value.Name)
			}
			assert.Subset(t, names, []string{"traceparent", "tracestate"}, "%s %s", method, path)
			for status, r := range op.Responses.Map() {
				assert.Contains(t, r.Value.Headers, "traceresponse", "%s %s %s", method, path, status)
			}
		}
	}
	assert.Positive(t, ops)
	// Answers validate against the document, traceresponse included (its pattern).
	r := a.get("/v1/views/orders/k1", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.Equal(t, 200, r.StatusCode)
	require.NotEmpty(t, r.Header.Get("traceresponse"))
	r = a.get("/v1/views/orders/nope")
	require.Equal(t, 404, r.StatusCode)

	plain := tracedAPI(t, nil)
	plain.noSpec = false
	for path, item := range plain.spec().Paths.Map() {
		for method, op := range item.Operations() {
			for _, p := range op.Parameters {
				assert.NotEqual(t, "traceparent", p.Value.Name, "%s %s", method, path)
			}
			for status, r := range op.Responses.Map() {
				assert.NotContains(t, r.Value.Headers, "traceresponse", "%s %s %s", method, path, status)
			}
		}
	}
}
