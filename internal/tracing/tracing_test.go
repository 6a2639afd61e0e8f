package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/spans"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/internal/tracing/otlptest"
)

// clearOTel unsets the OTEL_* variables a developer's shell may hold, for the test.
func clearOTel(t *testing.T) {
	for _, name := range []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(name, "")
	}
}

func start(t *testing.T, cfg tracing.Config) (*tracing.Provider, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	p, err := tracing.Start(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, &logs
}

// emit ends one root span named name and flushes the provider.
func emit(t *testing.T, p *tracing.Provider, name string) trace.SpanContext {
	t.Helper()
	_, span := p.TracerProvider().Tracer("test").Start(t.Context(), name)
	span.End()
	require.NoError(t, p.Shutdown(t.Context()))
	return span.SpanContext()
}

func TestOffByDefault(t *testing.T) {
	clearOTel(t)
	p, logs := start(t, tracing.Config{Endpoint: "http://127.0.0.1:1"})
	assert.False(t, p.Enabled())
	assert.Nil(t, spans.Tracer(p.TracerProvider(), "s"), "a provider the libraries skip")
	assert.NoError(t, p.Shutdown(t.Context()))
	assert.Empty(t, logs.String())

	t.Setenv("OTEL_SDK_DISABLED", "true")
	p, _ = start(t, tracing.Config{Enabled: true})
	assert.False(t, p.Enabled(), "OTEL_SDK_DISABLED wins")
}

// Over HTTP to the configured endpoint (its path joined with /v1/traces), with the service
// name, flushed by Shutdown.
func TestExportOverHTTP(t *testing.T) {
	clearOTel(t)
	r := otlptest.Start(t)
	p, logs := start(t, tracing.Config{Enabled: true, Endpoint: r.HTTPEndpoint() + "/otlp", Protocol: tracing.ProtocolHTTP,
		SamplerRatio: 1, ServiceName: "jetbus-bridge"})
	assert.True(t, p.Enabled())
	assert.NotNil(t, spans.Tracer(p.TracerProvider(), "s"))
	sc := emit(t, p, "one")
	got := r.Spans()
	require.Len(t, got, 1, "Shutdown flushed the batch")
	assert.Equal(t, "one", got[0].Name)
	assert.Equal(t, "jetbus-bridge", got[0].Service)
	assert.Equal(t, sc.TraceID().String(), got[0].TraceID)
	assert.Equal(t, "/otlp/v1/traces", got[0].Path)
	assert.Contains(t, logs.String(), `"msg":"tracing on"`)
	assert.NoError(t, p.Shutdown(t.Context()), "idempotent")
}

func TestExportOverGRPC(t *testing.T) {
	clearOTel(t)
	r := otlptest.Start(t)
	p, _ := start(t, tracing.Config{Enabled: true, Endpoint: r.GRPCEndpoint(), Protocol: tracing.ProtocolGRPC, SamplerRatio: 1, ServiceName: "jetbus-projector"})
	emit(t, p, "two")
	got := r.Spans()
	require.Len(t, got, 1)
	assert.Equal(t, "jetbus-projector", got[0].Service)
	assert.Empty(t, got[0].Path, "gRPC")
}

// The standard variables win over the configuration: endpoint, protocol, service name,
// sampler ratio.
func TestOTelVariablesWin(t *testing.T) {
	clearOTel(t)
	r := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.GRPCEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	p, _ := start(t, tracing.Config{Enabled: true, Endpoint: "http://127.0.0.1:1", Protocol: tracing.ProtocolHTTP, SamplerRatio: 1, ServiceName: "jetbus-bridge"})
	emit(t, p, "three")
	got := r.Spans()
	require.Len(t, got, 1)
	assert.Equal(t, "from-env", got[0].Service)
	assert.Empty(t, got[0].Path, "over gRPC, as the variable says")

	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	p, _ = start(t, tracing.Config{Enabled: true, SamplerRatio: 1})
	tr := p.TracerProvider().Tracer("test")
	_, root := tr.Start(t.Context(), "root")
	assert.False(t, root.SpanContext().IsSampled(), "no new trace sampled")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(t.Context(), parent), "child")
	assert.True(t, child.SpanContext().IsSampled(), "a sampled parent's decision is kept")

	for name, value := range map[string]string{"OTEL_TRACES_SAMPLER_ARG": "2", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			_, err := tracing.Start(t.Context(), tracing.Config{Enabled: true}, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), name)
		})
	}
}

// The configured ratio applies to new traces; a parent's decision is kept.
func TestSamplerRatio(t *testing.T) {
	clearOTel(t)
	p, _ := start(t, tracing.Config{Enabled: true, SamplerRatio: 0})
	_, root := p.TracerProvider().Tracer("test").Start(t.Context(), "root")
	assert.False(t, root.SpanContext().IsSampled())
	assert.True(t, root.SpanContext().IsValid(), "not sampled, still propagated")
}

// An unreachable receiver is no error at start; failed exports are logged, as JSON lines.
func TestUnreachableReceiverIsLogged(t *testing.T) {
	clearOTel(t)
	p, logs := start(t, tracing.Config{Enabled: true, Endpoint: "http://127.0.0.1:1", SamplerRatio: 1, ServiceName: "x"})
	_, span := p.TracerProvider().Tracer("test").Start(t.Context(), "lost")
	span.End()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
	assert.Contains(t, logs.String(), `"level":"WARN","msg":"tracing","error":"traces export:`)
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		assert.True(t, strings.HasPrefix(line, "{"), "a JSON line: %q", line)
	}
}
