package schema_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

const benchSchema = `{
  "type": "object",
  "properties": {
    "order": {"type": "integer", "minimum": 1},
    "customer": {"type": "string", "pattern": "^c-[0-9]+$"},
    "amount": {"type": "number", "exclusiveMinimum": 0},
    "currency": {"enum": ["EUR", "USD", "GBP"]},
    "items": {"type": "array", "minItems": 1, "items": {
      "type": "object",
      "properties": {"sku": {"type": "string", "maxLength": 32}, "qty": {"type": "integer", "minimum": 1}},
      "required": ["sku", "qty"],
      "additionalProperties": false
    }}
  },
  "required": ["order", "customer", "amount", "items"],
  "additionalProperties": false
}`

var benchEvent = json.RawMessage(`{"order":12345,"customer":"c-987","amount":42.5,"currency":"EUR","items":[{"sku":"a-1","qty":1},{"sku":"b-2","qty":3}]}`)

// BenchmarkPublish publishes the same event through two Buses on the same embedded server in
// the same run: "plain" without middleware, "validated" with the registry's publish
// middleware (validation against the latest schema and the version stamp).
func BenchmarkPublish(b *testing.B) {
	s := embeddedtest.NATS(b)
	ctx := context.Background()
	nc := embeddedtest.Connect(b, s.ClientURL())
	reg := openRegistryB(b, s.ClientURL())
	_, err := reg.Register(ctx, "bench.validated", []byte(benchSchema))
	require.NoError(b, err)
	plain, err := jbjs.Open(ctx, nc)
	require.NoError(b, err)
	defer plain.Close()
	validated, err := jbjs.Open(ctx, embeddedtest.Connect(b, s.ClientURL()), jbjs.WithPublishMiddleware(reg.PublishMiddleware()))
	require.NoError(b, err)
	defer validated.Close()
	require.NoError(b, plain.EnsureTopic(ctx, jbjs.TopicConfig{Name: "bench.plain"}))
	require.NoError(b, plain.EnsureTopic(ctx, jbjs.TopicConfig{Name: "bench.validated"}))

	run := func(bus *jbjs.Bus, topic string) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bus.Publish(ctx, topic, benchEvent, jetbus.WithKey("k")); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("plain", run(plain, "bench.plain"))
	b.Run("validated", run(validated, "bench.validated"))

	// Interleaved: one plain and one validated publish per iteration, so load from anything
	// else on the machine falls on both alike. Reports each side's time and their ratio.
	b.Run("interleaved", func(b *testing.B) {
		var tp, tv time.Duration
		n := 0
		for b.Loop() {
			t0 := time.Now()
			if _, err := plain.Publish(ctx, "bench.plain", benchEvent, jetbus.WithKey("k")); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := validated.Publish(ctx, "bench.validated", benchEvent, jetbus.WithKey("k")); err != nil {
				b.Fatal(err)
			}
			tv += time.Since(t1)
			tp += t1.Sub(t0)
			n++
		}
		b.ReportMetric(float64(tp.Nanoseconds())/float64(n), "plain-ns/pub")
		b.ReportMetric(float64(tv.Nanoseconds())/float64(n), "validated-ns/pub")
		b.ReportMetric(float64(tv)/float64(tp), "ratio")
	})
}

// BenchmarkValidate measures validation alone, with the compiled schema cached.
func BenchmarkValidate(b *testing.B) {
	v, err := schema.Compile([]byte(benchSchema))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(benchEvent); err != nil {
			b.Fatal(err)
		}
	}
}

func openRegistryB(b *testing.B, url string) *schema.Registry {
	b.Helper()
	js, err := natsjsNew(embeddedtest.Connect(b, url))
	require.NoError(b, err)
	r, err := schema.Open(context.Background(), js)
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Close() })
	return r
}
