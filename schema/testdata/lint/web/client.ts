import { headers } from "nats";

export async function place(js: JetStreamClient, order: Uint8Array) {
  await js.publish("orders.created.p1", order, { headers: { "x-tenant": "acme", "Content-Language": "en" } });
  await js.publish('orders_created.p0', order);
  await js.publish(
    "inventory.reserved.p0",
    order,
  );
}
