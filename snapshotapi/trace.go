package snapshotapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus/internal/spans"
)

// Tracing. With a tracer provider that records (WithTracerProvider), every request is a
// server span "<method> <route>" (the route as OpenAPI writes it: GET /v1/views/{view}/{key}),
// a child of the request's W3C traceparent (and tracestate) when it is valid, and the answer
// carries the span's context in a traceresponse header (W3C Trace Context Level 2:
// 00-<trace-id>-<span-id>-<flags>), so that a client finds the trace of its request. A read
// with ?after= waits under a child span "await <view>". Without tracing none of this runs
// and no traceresponse is sent.
//
// A hand-made middleware rather than otelhttp: the route is echo's, known only inside the
// router; otelhttp sends no traceresponse; and it would bring its own metrics and a module
// more for what is twenty lines here.

// scope is the instrumentation scope of the API's spans.
const scope = "github.com/jetbus/jetbus/snapshotapi"

// HeaderTraceResponse is the response header that carries the request's span context.
const HeaderTraceResponse = "traceresponse"

// WithTracerProvider traces the API with tp (OpenTelemetry): a server span per request, a
// child span per ?after= wait, and a traceresponse header on every answer. Default: the global
// provider as it is when New runs, which traces nothing until one is set.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *settings) error { o.tp = tp; return nil }
}

var (
	serverKind   = trace.WithSpanKind(trace.SpanKindServer)
	internalKind = trace.WithSpanKind(trace.SpanKindInternal)
)

// Attributes of the await span.
const (
	attrView  = attribute.Key("jetbus.view")
	attrAfter = attribute.Key("jetbus.after")
)

// traced is the middleware that starts each request's server span, when the API traces.
func (s *Server) traced(next echo.HandlerFunc) echo.HandlerFunc {
	if s.tracer == nil {
		return next
	}
	return func(c echo.Context) error {
		r := c.Request()
		ctx := r.Context()
		if tp := r.Header.Values("traceparent"); len(tp) == 1 {
			ctx = spans.ParentOf(ctx, tp[0], strings.Join(r.Header.Values("tracestate"), ","))
		}
		route := openAPIRoute(c.Path())
		name := r.Method
		if route != "" {
			name += " " + route
		}
		ctx, span := s.tracer.Start(ctx, name, serverKind)
		if span.IsRecording() {
			span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path))
			if route != "" {
				span.SetAttributes(semconv.HTTPRoute(route))
			}
		}
		if sc := span.SpanContext(); sc.IsValid() {
			c.Response().Header().Set(HeaderTraceResponse, spans.TraceParent(sc))
		}
		c.SetRequest(r.WithContext(ctx))
		err := next(c)
		if span.IsRecording() {
			status := c.Response().Status
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			if err != nil {
				span.RecordError(err)
			}
		}
		span.End()
		return err
	}
}

// openAPIRoute is echo's route as OpenAPI writes it: /v1/views/:view is /v1/views/{view}.
func openAPIRoute(path string) string {
	if !strings.Contains(path, ":") {
		return path
	}
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// startAwait starts the span of an ?after= wait, when the API traces.
func (s *Server) startAwait(ctx context.Context, v *view, rp readParams) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	ctx, span := s.tracer.Start(ctx, "await "+v.Name, internalKind)
	if span.IsRecording() {
		after := make([]string, len(rp.after))
		for i, p := range rp.after {
			after[i] = strconv.Itoa(p.partition) + ":" + strconv.FormatUint(p.seq, 10)
		}
		span.SetAttributes(attrView.String(v.Name), semconv.MessagingDestinationName(v.Topic), attrAfter.String(strings.Join(after, ",")))
	}
	return ctx, span
}

// endAwait ends the span of a wait (nil: none) with its refusal (nil: applied).
func endAwait(span trace.Span, e *apiError) {
	if span == nil {
		return
	}
	if e != nil && span.IsRecording() {
		span.SetAttributes(semconv.ErrorTypeKey.String(e.Code))
		span.SetStatus(codes.Error, e.Message)
	}
	span.End()
}
