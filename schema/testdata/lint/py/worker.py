async def handle(nc, js, order):
    await js.publish("orders.created.p3", order, headers={"Nats-Msg-Id": "o-1", "x-key": "c-7", "x-tenant": "acme", "X-Upper": "no"})
    await nc.publish('in.shipments.Sent', order)
    await nc.publish("dlq.orders", order)
    await nc.publish("orders.created", order)
