package jetbus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestValidTraceParent(t *testing.T) {
	for _, s := range []string{
		validTP,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",             // sampled and random
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-more-fields", // a later version
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	} {
		assert.True(t, jetbus.ValidTraceParent(s), s)
	}
	for _, s := range []string{
		"",
		"garbage",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", // uppercase
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace-id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent-id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		validTP + "-x", // version 00 with more
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\r\nx-dlq-reason: y",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", jetbus.MaxTraceParentLength),
	} {
		assert.False(t, jetbus.ValidTraceParent(s), "%q", s)
	}
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", jetbus.TraceIDOf(validTP))
	assert.Equal(t, "", jetbus.TraceIDOf("00-zz"))
	e := jetbus.Event{TraceParent: validTP}
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", e.TraceID())
}

func TestValidTraceState(t *testing.T) {
	for _, s := range []string{
		"",
		"congo=t61rcWkgMzE",
		"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
		" rojo=00f067aa0ba902b7 ,\tcongo=t61rcWkgMzE ",
	} {
		assert.True(t, jetbus.ValidTraceState(s), "%q", s)
	}
	assert.True(t, jetbus.ValidTraceState("tenant1@vendor=v a l u e,x/y*z_-=1"))
	assert.True(t, jetbus.ValidTraceState("rojo=1,,congo=2"), "empty members are allowed")
	for _, s := range []string{
		"Rojo=1",               // uppercase key
		"rojo",                 // no value
		"rojo=",                // empty value
		"rojo=a=b",             // = in the value
		"rojo=1,rojo=2",        // duplicate key
		"1rojo=1",              // a simple key starts with a letter
		"t@1vendor=1",          // a system-id starts with a letter
		"t@vendorvendorvend=1", // a system-id is at most 14 characters
		"rojo=\x01",            // control character
		"rojo=1\r\nx-dlq-a: b", // header injection
		strings.Repeat("k=v,", jetbus.MaxTraceStateMembers) + "z=1", // 33 members
		"k=" + strings.Repeat("v", jetbus.MaxTraceStateLength),      // too long
	} {
		assert.False(t, jetbus.ValidTraceState(s), "%q", s)
	}
}

func TestFilterBaggage(t *testing.T) {
	keep := func(k string) bool { return k == "tenant" || k == "user.id" }
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"tenant=acme", "tenant=acme"},
		{"tenant=acme,secret=s3cr3t", "tenant=acme"},
		{" secret=x , user.id = 42;ttl=5 ,tenant=a%20b", "user.id = 42;ttl=5,tenant=a%20b"},
		{"other=1", ""},
		{"tenant=acme;flag", "tenant=acme;flag"},
	} {
		got, ok := jetbus.FilterBaggage(c.in, keep)
		assert.True(t, ok, "%q", c.in)
		assert.Equal(t, c.want, got, "%q", c.in)
	}
	for _, s := range []string{
		"tenant",            // no value
		"ten ant=1",         // not a token
		"tenant=a b",        // space in a value
		"tenant=\"quoted\"", // DQUOTE
		"tenant=1;=x",       // a property without a key
		"tenant=%",          // a broken percent-encoding
		"tenant=%4g",
		"tenant=1\r\nx-dlq-a: b", // header injection
		"tenant=" + strings.Repeat("a", jetbus.MaxBaggageLength),
		strings.Repeat("k=v,", jetbus.MaxBaggageMembers) + "z=1",
	} {
		got, ok := jetbus.FilterBaggage(s, keep)
		assert.False(t, ok, "%q", s)
		assert.Empty(t, got)
	}
	assert.NoError(t, jetbus.ValidateBaggageKey("user.id"))
	for _, k := range []string{"", "a b", "a=b", "ключ", "a,b"} {
		assert.ErrorIs(t, jetbus.ValidateBaggageKey(k), jetbus.ErrInvalidOption, "%q", k)
	}
}

// What jetbus accepts, OpenTelemetry's W3C propagators parse to the same trace: a consumer
// extracting an event's headers with them never loses a trace context jetbus kept.
func FuzzTraceContextAgreesWithOTel(f *testing.F) {
	f.Add(validTP, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "tenant=acme;p=1,x=%20")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-more", " a=b ,, c@d=e", "k = v")
	f.Fuzz(func(t *testing.T, tp, ts, bg string) {
		carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": ts}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		if jetbus.ValidTraceParent(tp) {
			if !sc.IsValid() || sc.TraceID().String() != jetbus.TraceIDOf(tp) || sc.SpanID().String() != tp[36:52] {
				t.Fatalf("jetbus accepts traceparent %q, OpenTelemetry reads %v", tp, sc)
			}
			if jetbus.ValidTraceState(ts) {
				if _, err := trace.ParseTraceState(ts); err != nil {
					t.Fatalf("jetbus accepts tracestate %q, OpenTelemetry does not: %v", ts, err)
				}
			}
		}
		if kept, ok := jetbus.FilterBaggage(bg, func(string) bool { return true }); ok {
			if _, err := baggage.Parse(kept); err != nil {
				t.Fatalf("jetbus keeps baggage %q of %q, OpenTelemetry does not parse it: %v", kept, bg, err)
			}
		}
	})
}
