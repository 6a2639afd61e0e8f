package jetbus

import "context"

// Optional capabilities of a Bus. A Bus implements Bus; it may also implement the interfaces
// below, which callers find with a type assertion:
//
//	ps, ok := bus.(jetbus.PartitionSubscriber)
//
// Package jetstream's Bus implements every one of them.

// PartitionSubscriber is the capability of consuming a single partition of a topic for a
// group, under a fence held outside the Bus. Package partition uses it to consume the
// partitions the group's assignment gives a member, each under its lease.
type PartitionSubscriber interface {
	// Partitions returns the topic's partition count.
	Partitions(ctx context.Context, topic string) (int, error)
	// SubscribePartition consumes partition p of topic as group, as Subscribe does for every
	// partition, through the same durable consumer ConsumerName(group, p). It takes the
	// partition at once from a client that still holds it (a crashed member whose hold has
	// not expired yet) and returns that client's unacknowledged deliveries to the consumer so
	// they come first, in order: call it only under a fence, such as package partition's
	// leases, that guarantees the previous holder stopped. Stop returns unstarted deliveries
	// to the server. FanIn is refused (ErrInvalidOption).
	SubscribePartition(ctx context.Context, topic, group string, p int, h Handler, opts ...SubscribeOption) (Subscription, error)
}
