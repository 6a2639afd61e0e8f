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

// BenchmarkTracing compares a Bus with tracing off (the default: no provider) with one tracing
// every publish and delivery (an SDK provider sampling every trace, its batch span processor
// exporting to nowhere), on the same connection and server, alternating as ab does. The
// ratio is on/off: throughput for PublishAsync and ConsumeAck, latency for PublishSync.
// The events the "on" side consumes carry the traceparent its publishes wrote.
func BenchmarkTracing(b *testing.B) {
	setup := func(b *testing.B) (*benchEnv, *jbjs.Bus) {
		e := newBenchEnv(b)
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		on, err := jbjs.Open(context.Background(), e.nc, jbjs.WithTracerProvider(tp))
		require.NoError(b, err)
		return e, on
	}
	ctx := context.Background()
	b.Run("PublishSync", func(b *testing.B) {
		e, on := setup(b)
		offTopic, onTopic := e.topic(b), e.topic(b)
		publish := func(bus *jbjs.Bus, topic string) func(int) time.Duration {
			return func(n int) time.Duration {
				t0 := time.Now()
				for range n {
					if _, err := bus.Publish(ctx, topic, benchPayload); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(t0)
			}
		}
		abNamed(b, "off", "on", publish(e.bus, offTopic), publish(on, onTopic), true)
	})
	b.Run("PublishAsync", func(b *testing.B) {
		e, on := setup(b)
		offTopic, onTopic := e.topic(b), e.topic(b)
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
		abNamed(b, "off", "on", publish(e.bus, offTopic), publish(on, onTopic), false)
	})
	b.Run("ConsumeAck", func(b *testing.B) {
		e, on := setup(b)
		consume := func(bus *jbjs.Bus) func(int) time.Duration {
			return func(n int) time.Duration {
				topic := e.topic(b)
				fill := &benchEnv{bus: bus}
				fill.fill(b, topic, n)
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
	})
}
