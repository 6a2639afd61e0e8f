package main

import (
	"context"

	"github.com/jetbus/jetbus"
)

const (
	topicOrders  = "orders.created"
	topicBad     = "Orders.Created"
	topicPrefix  = "users."
	topicSignup  = topicPrefix + "signedup"
	headerTenant = "x-tenant"
)

type publisher interface {
	Publish(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error)
}

func run(ctx context.Context, bus publisher, dynamic string) {
	bus.Publish(ctx, topicOrders, map[string]int{"qty": 1})
	bus.Publish(ctx, "orders.created.v1", nil)
	bus.Publish(ctx, topicBad, nil)
	bus.Publish(ctx, topicSignup, nil, jetbus.WithHeaders(map[string]string{headerTenant: "t", "Trace-Id": "x"}))
	bus.Publish(ctx, "payments.settled", nil)
	bus.Publish(ctx, dynamic, "not a topic")
	bus.Publish(ctx, "dlq.orders", nil, jetbus.WithHeaders(map[string]string{"x-key": "k"}))
}
