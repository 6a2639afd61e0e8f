import { bus } from "./bus";

export async function place(order: Order) {
  await bus.publish("orders.created", order, { headers: { "x-tenant": "acme", "Content-Language": "en" } });
  await bus.publish('orders_created', order);
  await bus.publish(
    "inventory.reserved",
    order,
  );
}
