// Package jetbus is the contract of the jetbus event bus: the Event, the Bus interface,
// handlers and deliveries, publish and subscribe options, middleware types and errors.
//
// It holds no logic beyond option handling and validation of names. The implementation on
// JetStream lives in package jetstream; partitioned consumer groups in package partition;
// schemas in package schema; dead letters in package dlq.
//
// # Semantics
//
// Publish writes one event to a topic. The event's ID is a UUIDv7 unless WithID sets one;
// JetStream drops a second publish of the same ID within the topic's duplicate window, so a
// retried publish is harmless. Events with the same key land in the same partition and keep
// their order.
//
// Subscribe consumes a topic as a durable group: every event is delivered to one member of the
// group, and the group's position (its cursor) survives restarts. The handler's result decides
// what happens to the event:
//
//   - nil: the event is acknowledged (unless ManualAck is set: then Bus.Ack or Bus.Nack does).
//   - an error: the event is delivered again after the Backoff delay, up to MaxAttempts
//     deliveries in all.
//   - Permanent(err), or an error on the last attempt: the event is handed to the dead-letter
//     step (the DLQ middleware of package dlq, when installed) and then terminated. It is never
//     silently dropped: it stays in the topic's stream, and JetStream publishes an advisory for
//     every terminated message.
//
// Order holds per key within a partition as long as handlers succeed. A failed event is
// redelivered after its backoff, behind the events that followed it; handlers that need strict
// per-key order across retries use the per-key mode of package partition.
package jetbus
