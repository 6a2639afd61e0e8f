// Package partition owns how a consumer group's partitions are spread over its members: group
// membership in KV, the assignment of partitions to members, partition leases, and the
// partitioned subscriber that puts them together.
//
// It does not own the key hash (the wire contract's jetbus.PartitionOf), streams, consumers,
// fetching, acknowledgement or retries: those are the Bus's (package jetstream), reached
// through its jetbus.PartitionSubscriber capability. Per-key parallelism inside a partition
// is the Bus's as well.
//
// # Keys and partitions
//
// The partition of a key is jetbus.PartitionOf(key, N) = jetbus.Jump(jetbus.KeyHash(key), N):
// FNV-1a 64 of the key's UTF-8 bytes, then Lamping and Veach's jump consistent hash. They live
// in the root package with the other wire-contract names, because every jetbus client, in any
// language, computes them; the vectors in testdata/partition_vectors.json pin them. Growing N to N+1
// moves about 1/(N+1) of the keys, all to the new partition.
//
// # Buckets and keys
//
// Per group, the bucket "jetbus_group_<group>" (MaxAge = the member TTL, History 1, limit
// markers on so that every watcher sees a key expire) holds:
//
//	m.<topic>.<member>   a member of the group for topic: JSON MemberInfo (id, host, pid,
//	                     version, joined), rewritten every heartbeat
//	l.<topic>.p<n>       the lease of partition n: JSON LeaseInfo (owner, acquired, renewed),
//	                     created with a compare-and-set on the key's last revision, renewed
//	                     with an update on the revision, released with a delete on the
//	                     revision; an unrenewed lease expires with the bucket's MaxAge
//
// The bucket "jetbus_assignments" (no expiry, History 1) holds one key per group and topic:
//
//	<group>.<topic>      the current assignment: JSON {members, owners, as_of} (owners[p]
//	                     is the member owning partition p; as_of the group bucket revision
//	                     up to which the writer had seen the member list)
//
// # Assignment
//
// Every member watches the member keys and the assignment key. When the live members differ
// from the members the stored assignment was computed for, a member computes
// Rebalance(stored owners, live members, P) — a pure function, so every member computes the
// same — and stores it with a compare-and-set on the key's revision; the others see it through
// their watch. A member writes only when its view of the member list is at least as recent
// (by bucket revision) as the view the stored assignment was computed from, so members whose
// watchers lag do not overwrite each other. Rebalance is balanced (loads differ by at most one) and moves as little as
// possible: when one member joins M members, only partitions that go to it move (at most
// ⌈P/(M+1)⌉); when one leaves, only its partitions move. The previous assignment is an input
// because no function of the member set alone can have both properties (see Rebalance).
//
// # Ownership and fencing
//
// A member consumes partition p only while it holds p's lease. The owner named by the
// assignment takes the lease with a create; if another member holds it, it watches the key
// until the holder releases it or it expires. On a handoff the old owner stops fetching,
// finishes the running handler and returns the fetched but unstarted events to the server
// (Subscription.Stop; Drain handles them instead), then releases the lease. The new owner
// subscribes to p with the Bus's SubscribePartition; the Bus pins each partition's consumer
// to one client (priority group "jetbus", policy pinned_client), a second fence. An owner that cannot renew its lease stops the partition at once.
//
// # Operations
//
// Status returns a group's members, stored assignment and leases (for an /ops/partitions
// endpoint or a CLI); WatchMembers streams membership changes; Subscriber.Owned lists the
// partitions a member consumes now.
//
// # Timeouts
//
// Every timeout derives from Config.TTL, the member TTL (default 5s; see Timeouts):
//
//	heartbeat interval = TTL/3     a member silent for TTL expires
//	lease TTL          = TTL       (the same bucket's MaxAge)
//	renew interval     = TTL/3
//	guard              = 4·TTL/5   an owner whose last successful renewal was sent this long
//	                               ago stops the partition, before the server can expire
//	                               the lease
//
// After a graceful leave or handoff the next owner starts at once (about one KV round trip
// per step). After a crash the member and its leases expire within TTL of their last write;
// the next owner then waits, if the dead owner had deliveries in flight, until its last
// delivery is older than the subscription's AckTimeout (plus a tenth and 200ms for the
// server's redelivery timer), so that those events are redelivered first and per-key order
// holds. Relation to AckTimeout: a handler must return within
// AckTimeout (otherwise its event is redelivered anyway); under that condition no partition
// is ever handled by two members at once, and a crashed member's partitions resume within
// max(TTL, AckTimeout) plus a KV round trip. Choose TTL well above the KV round-trip time
// (a loaded cluster needs seconds, not hundreds of milliseconds). A handler whose effects are
// fenced or idempotent (Config.Fenced: the projections) does not need that exclusivity: its
// partitions resume once the crashed member's leases expired (TTL), the Bus's take-over
// returning the unacknowledged deliveries first, in order.
package partition
