// Package tracing is the OpenTelemetry SDK of jetbus's processes: a tracer provider built from
// the tracing section (mapped by package wiring) and the standard OTEL_* environment
// variables, exporting spans over OTLP (HTTP or gRPC) in batches, and flushed when the
// process stops. The libraries trace through the OpenTelemetry API with the provider they are
// given (jetstream.WithTracerProvider); only the processes link the SDK, here.
//
// Off (the default) it starts nothing: Provider.TracerProvider is a no-op provider, which the
// libraries recognise and skip, so tracing that is off costs nothing.
//
// The OTEL_* variables win over the configuration's keys, as they are meant to be set per
// deployment: OTEL_SDK_DISABLED=true turns tracing off; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf) choose the protocol;
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT the endpoint;
// OTEL_TRACES_SAMPLER (with OTEL_TRACES_SAMPLER_ARG) the sampler, or OTEL_TRACES_SAMPLER_ARG
// alone the ratio of the default parentbased_traceidratio; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES the resource. The SDK reads the rest itself (headers,
// certificates, timeouts, compression, OTEL_BSP_* for the batches).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Defaults of Config, which the tracing section states too (internal/wiring's defaults test).
const (
	// DefaultProtocol is OTLP over HTTP with protobuf, the OpenTelemetry specification's
	// default.
	DefaultProtocol = ProtocolHTTP
	// DefaultSamplerRatio samples every new trace.
	DefaultSamplerRatio = 1.0
)

// Protocols of the OTLP exporter.
const (
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

// Config is the tracing of one process.
type Config struct {
	// Enabled starts the SDK; without it nothing is started.
	Enabled bool
	// Endpoint is the OTLP receiver's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: http:// for
	// plaintext, https:// for TLS; over HTTP spans go to its path joined with /v1/traces.
	// Empty: the SDK's default (or the OTEL_* variables').
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC ("": DefaultProtocol).
	Protocol string
	// SamplerRatio is the share of new traces sampled (parentbased_traceidratio: a span with
	// a parent follows the parent's decision), from 0 to 1. It is taken as is: 0 samples no
	// new trace.
	SamplerRatio float64
	// ServiceName is the resource's service.name ("": jetbus).
	ServiceName string
}

// Provider is a process's tracer provider: the SDK's, or a no-op one when tracing is off.
type Provider struct {
	sdk *sdktrace.TracerProvider
	tp  trace.TracerProvider
}

// Off is a Provider that traces nothing.
func Off() *Provider { return &Provider{tp: noop.NewTracerProvider()} }

// TracerProvider returns the provider the process's components trace with.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Enabled reports whether the SDK runs.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Shutdown exports the spans still buffered and stops the exporter; ctx bounds the wait. It
// does nothing when tracing is off, and is idempotent.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush: %w", err)
	}
	return nil
}

// Start returns the provider cfg and the OTEL_* variables ask for. With tracing off it is Off.
// Exporting starts lazily: an unreachable receiver is not an error here, but logged (at
// most as often as batches are exported) through log, which also receives the SDK's own
// diagnostics (the SDK's global error handler and logger are set to it).
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !cfg.Enabled || envTrue("OTEL_SDK_DISABLED") {
		return Off(), nil
	}
	protocol, err := protocolOf(cfg.Protocol)
	if err != nil {
		return nil, err
	}
	endpoint := cfg.Endpoint
	if env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		endpoint = "" // the SDK reads the variable
	}
	exp, err := exporter(ctx, protocol, endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "jetbus"
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(version())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	sampler := "OTEL_TRACES_SAMPLER=" + env("OTEL_TRACES_SAMPLER") // the SDK reads it, and its argument
	if env("OTEL_TRACES_SAMPLER") == "" {
		ratio := cfg.SamplerRatio
		if arg := env("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			if ratio, err = strconv.ParseFloat(arg, 64); err != nil || !(ratio >= 0 && ratio <= 1) {
				return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
			}
		}
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
		sampler = "parentbased_traceidratio " + strconv.FormatFloat(ratio, 'g', -1, 64)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "error", err) }))
	otel.SetLogger(logr.FromSlogHandler(log.With("component", "tracing").Handler()))
	sdk := sdktrace.NewTracerProvider(opts...)
	log.Info("tracing on", "protocol", protocol, "endpoint", describeEndpoint(endpoint), "service", serviceName(res), "sampler", sampler)
	return &Provider{sdk: sdk, tp: sdk}, nil
}

// protocolOf is the protocol of the configuration, unless the OTEL_* variables say another.
func protocolOf(configured string) (string, error) {
	p := configured
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := env(name); v != "" {
			switch v {
			case "grpc":
				p = ProtocolGRPC
			case "http/protobuf":
				p = ProtocolHTTP
			default:
				return "", fmt.Errorf("tracing: %s=%q: want grpc or http/protobuf", name, v)
			}
			break
		}
	}
	switch p {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("tracing: protocol %q: want http or grpc", p)
}

// exporter returns the OTLP exporter of protocol, sending to endpoint ("": the SDK's default
// or its variables').
func exporter(ctx context.Context, protocol, endpoint string) (sdktrace.SpanExporter, error) {
	var u *url.URL
	if endpoint != "" {
		var err error
		if u, err = url.Parse(endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("tracing: endpoint %q: want a URL such as http://otel-collector:4318", endpoint)
		}
	}
	if protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpoint(u.Host))
			if u.Scheme == "http" {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/gRPC exporter: %w", err)
		}
		return exp, nil
	}
	var opts []otlptracehttp.Option
	if u != nil {
		opts = append(opts, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path.Join("/", u.Path, "v1/traces")))
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
	}
	return exp, nil
}

func describeEndpoint(endpoint string) string {
	if endpoint != "" {
		return endpoint
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := env(name); v != "" {
			return name + "=" + v
		}
	}
	return "the SDK's default"
}

func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

// version is the binary's module version (service.version).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

func envTrue(name string) bool {
	b, err := strconv.ParseBool(env(name))
	return err == nil && b
}
