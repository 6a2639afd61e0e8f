package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// Wiring a service: validate and stamp on publish, dual-write, upcast on consume.
func ExampleRegistry_PublishMiddleware() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	reg, err := schema.Open(ctx, js, schema.WithStrict())
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	bus, err := jbjs.Open(ctx, nc,
		jbjs.WithPublishMiddleware(reg.PublishMiddleware(), reg.DualWriteMiddleware()),
		jbjs.WithHandlerMiddleware(reg.UpcastMiddleware()))
	if err != nil {
		log.Fatal(err)
	}
	defer bus.Close()

	_, err = bus.Publish(ctx, "orders.created", json.RawMessage(`{"id":"o-1","qty":0}`))
	var invalid *schema.ValidationError
	if errors.As(err, &invalid) {
		for _, f := range invalid.Failures {
			fmt.Println(f.Pointer, f.Message)
		}
	}
	_, _ = bus.Subscribe(ctx, "orders.created", "billing", func(ctx context.Context, d *jetbus.Delivery) error {
		// d.Payload is valid under the latest version of the schema.
		return nil
	})
}

func ExampleCompatible() {
	v1 := []byte(`{"type":"object","properties":{"qty":{"type":"integer"}},"additionalProperties":false}`)
	v2 := []byte(`{"type":"object","properties":{"qty":{"type":"integer"},"note":{"type":"string"}},"required":["note"],"additionalProperties":false}`)
	err := schema.Compatible(schema.ModeBackward, v2, v1)
	var ie *schema.IncompatibleError
	if errors.As(err, &ie) {
		for _, r := range ie.Reasons {
			fmt.Println(r.Pointer, r.Rule)
		}
	}
	// Output:
	// /required REQUIRED_PROPERTY_ADDED
}
