package jetstream_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetbus/jetbus"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// discard is a span exporter that drops what it is given: the SDK's work (sampling,
// recording, the batch queue) without a collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// sampledTP is a sampled traceparent, as a client that traces sends it.
const sampledTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// BenchmarkTracing compares a Bus with tracing off (the default: no provider) with the same
// work traced, on the same connection and server, alternating as ab does; the ratio is
// on/off (latency for PublishSync, throughput for the others). "on" is an SDK provider
// sampling every trace whose batch span processor exports to nowhere, "tenth" one sampling a
// tenth of new traces (parentbased_traceidratio 0.1, as tracing.sampler_ratio: 0.1 makes
// it). Two more PublishSync variants take the cost apart: "unsampled" is the SDK sampling
// nothing (the span context
// is still made and carried, with the sampled flag off), "header" no SDK at all but events
// carrying a sampled traceparent (what the NATS server does with one: it looks for message
// tracing in the headers of every message whose traceparent is sampled). The events the
// "on" side of ConsumeAck consumes carry the traceparent its publishes wrote.
func BenchmarkTracing(b *testing.B) {
	ctx := context.Background()
	traced := func(b *testing.B, e *benchEnv, sampler sdktrace.Sampler) *jbjs.Bus {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sampler))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		on, err := jbjs.Open(ctx, e.nc, jbjs.WithTracerProvider(tp))
		require.NoError(b, err)
		return on
	}
	publishSync := func(b *testing.B, bus *jbjs.Bus, topic string, opts ...jetbus.PublishOption) func(int) time.Duration {
		return func(n int) time.Duration {
			t0 := time.Now()
			for range n {
				if _, err := bus.Publish(ctx, topic, benchPayload, opts...); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0)
		}
	}
	b.Run("PublishSync/on", func(b *testing.B) {
		e := newBenchEnv(b)
		on := traced(b, e, sdktrace.AlwaysSample())
		abNamed(b, "off", "on", publishSync(b, e.bus, e.topic(b)), publishSync(b, on, e.topic(b)), true)
	})
	b.Run("PublishSync/tenth", func(b *testing.B) {
		e := newBenchEnv(b)
		on := traced(b, e, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)))
		abNamed(b, "off", "on", publishSync(b, e.bus, e.topic(b)), publishSync(b, on, e.topic(b)), true)
	})
	b.Run("PublishSync/unsampled", func(b *testing.B) {
		e := newBenchEnv(b)
		on := traced(b, e, sdktrace.NeverSample())
		abNamed(b, "off", "on", publishSync(b, e.bus, e.topic(b)), publishSync(b, on, e.topic(b)), true)
	})
	b.Run("PublishSync/header", func(b *testing.B) {
		e := newBenchEnv(b)
		abNamed(b, "off", "on", publishSync(b, e.bus, e.topic(b)),
			publishSync(b, e.bus, e.topic(b), jetbus.WithTraceContext(sampledTP, "")), true)
	})
	b.Run("PublishAsync/on", func(b *testing.B) {
		e := newBenchEnv(b)
		on := traced(b, e, sdktrace.AlwaysSample())
		publish := func(bus *jbjs.Bus, topic string) func(int) time.Duration {
			return func(n int) time.Duration {
				t0 := time.Now()
				futs := make([]jetbus.PublishFuture, 0, n)
				for range n {
					f, err := bus.PublishAsync(ctx, topic, benchPayload)
					if err != nil {
						b.Fatal(err)
					}
					futs = append(futs, f)
				}
				for _, f := range futs { // Wait ends the producer spans, as callers do
					if _, err := f.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(t0)
			}
		}
		abNamed(b, "off", "on", publish(e.bus, e.topic(b)), publish(on, e.topic(b)), false)
	})
	consumeAck := func(b *testing.B, sampler sdktrace.Sampler) {
		e := newBenchEnv(b)
		on := traced(b, e, sampler)
		consume := func(bus *jbjs.Bus) func(int) time.Duration {
			return func(n int) time.Duration {
				topic := e.topic(b)
				(&benchEnv{bus: bus}).fill(b, topic, n)
				var count atomic.Int64
				done := make(chan struct{})
				t0 := time.Now()
				sub, err := bus.Subscribe(ctx, topic, "bus", func(_ context.Context, d *jetbus.Delivery) error {
					var v map[string]any
					if err := json.Unmarshal(d.Payload, &v); err != nil {
						return err
					}
					if count.Add(1) == int64(n) {
						close(done)
					}
					return nil
				}, jetbus.FromEarliest(), jetbus.BatchSize(100))
				require.NoError(b, err)
				<-done
				d := time.Since(t0)
				_ = sub.Stop()
				return d
			}
		}
		abNamed(b, "off", "on", consume(e.bus), consume(on), false)
	}
	b.Run("ConsumeAck/on", func(b *testing.B) { consumeAck(b, sdktrace.AlwaysSample()) })
	b.Run("ConsumeAck/tenth", func(b *testing.B) { consumeAck(b, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))) })
}
