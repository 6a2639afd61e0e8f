// Package otlptest is an in-process OTLP receiver for tests: it accepts spans over OTLP/HTTP
// (protobuf) and OTLP/gRPC, as an OpenTelemetry Collector would, and keeps them, so that a
// test can check the spans a process exported. Only tests import it.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	// Service is the service.name of the span's resource.
	Service      string
	Name         string
	Kind         tracepb.Span_SpanKind
	TraceID      string // 32 lowercase hex digits
	SpanID       string // 16 lowercase hex digits
	ParentSpanID string // "" for a root span
	// TraceState is the span's W3C tracestate.
	TraceState string
	// Attributes holds every attribute's value as text (strings as they are, numbers in
	// decimal, booleans true or false).
	Attributes map[string]string
	// Links are the span contexts the span links to.
	Links []Link
	// Events are the names of the span's events, in order.
	Events []string
	// Error reports the error status.
	Error bool
	// Path is the HTTP path it was posted to ("" over gRPC).
	Path string
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver is a running OTLP receiver.
type Receiver struct {
	http *httptest.Server
	grpc *grpc.Server
	addr string

	mu    sync.Mutex
	spans []Span
}

// Start starts a receiver on loopback, stopped when t ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	r.http = httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(r.http.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlptest: %v", err)
	}
	r.addr = ln.Addr().String()
	r.grpc = grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(r.grpc, traceService{r: r})
	go func() { _ = r.grpc.Serve(ln) }()
	t.Cleanup(r.grpc.Stop)
	return r
}

// HTTPEndpoint is the base URL of the OTLP/HTTP receiver (it accepts spans at any path
// ending in /v1/traces), as OTEL_EXPORTER_OTLP_ENDPOINT or tracing.endpoint take it.
func (r *Receiver) HTTPEndpoint() string { return r.http.URL }

// GRPCEndpoint is the URL of the OTLP/gRPC receiver (plaintext).
func (r *Receiver) GRPCEndpoint() string { return "http://" + r.addr }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the spans received once done accepts them, or fails t after timeout.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := r.Spans()
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("otlptest: after %s, %d spans received, not the ones awaited: %v", timeout, len(s), names(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(spans []Span) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.Service+": "+s.Name)
	}
	return out
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/v1/traces") {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg, req.URL.Path)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req, "")
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest, path string) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := text(attr(rs.GetResource().GetAttributes(), "service.name"))
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					TraceState: s.GetTraceState(), Attributes: map[string]string{},
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Path: path,
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentSpanID = hex.EncodeToString(p)
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = text(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}
