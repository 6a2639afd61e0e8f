package spans_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Tracer is nil for what traces nothing, whatever the sampler for what does, and its probe
// is never exported.
func TestTracer(t *testing.T) {
	assert.Nil(t, spans.Tracer(nil, "s"), "the global provider, never set")
	assert.Nil(t, spans.Tracer(noop.NewTracerProvider(), "s"))
	sr := tracetest.NewSpanRecorder()
	for _, sampler := range []sdktrace.Sampler{sdktrace.AlwaysSample(), sdktrace.NeverSample(), sdktrace.TraceIDRatioBased(0.5)} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(sr))
		assert.NotNil(t, spans.Tracer(tp, "s"), sampler.Description())
		_ = tp.Shutdown(context.Background())
		assert.Nil(t, spans.Tracer(tp, "s"), "a provider shut down traces nothing")
	}
	assert.Empty(t, sr.Ended(), "probes are never exported")

	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	assert.NotNil(t, spans.Tracer(nil, "s"), "the global provider, once set")
}

func TestParentInjectLink(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := &jetbus.Event{TraceParent: tp, TraceState: "rojo=1"}
	sc := trace.SpanContextFromContext(spans.Parent(context.Background(), e))
	assert.True(t, sc.IsRemote())
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	assert.Equal(t, "rojo=1", sc.TraceState().String())
	assert.Equal(t, context.Background(), spans.Parent(context.Background(), &jetbus.Event{}))

	l, ok := spans.Link(e)
	assert.True(t, ok)
	assert.Equal(t, sc, l.SpanContext)
	_, ok = spans.Link(&jetbus.Event{})
	assert.False(t, ok)

	out := &jetbus.Event{TraceParent: "stale", TraceState: "stale=1"}
	assert.False(t, spans.Inject(context.Background(), out))
	assert.Equal(t, "stale", out.TraceParent, "untouched without a span")
	assert.True(t, spans.Inject(trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(trace.TraceState{})), out))
	assert.Equal(t, tp, out.TraceParent)
	assert.Empty(t, out.TraceState)
}
