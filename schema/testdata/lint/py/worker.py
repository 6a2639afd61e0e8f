def handle(bus, order):
    bus.publish("orders.created", order, headers={"x-tenant": "acme", "X-Upper": "no"})
    bus.publish('shipments.Sent', order)
    bus.publish("dlq.orders", order)
