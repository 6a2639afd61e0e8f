// Package partition owns how a consumer group's partitions are spread over its members: group
// membership in KV, the assignment of partitions to members, partition leases, and the
// partitioned subscriber that puts them together.
//
// It does not own the key hash (the wire contract's jetbus.PartitionOf), streams, consumers,
// fetching, acknowledgement or retries: those are the Bus's (package jetstream), reached
// through its jetbus.PartitionSubscriber capability. Per-key parallelism inside a partition
// is the Bus's as well.
//
// It is for ordered groups, whose per-key order needs one member per partition. An unordered
// group (jetbus.Unordered) needs none of it: every replica subscribes with Bus.Subscribe and
// pulls every partition; Subscribe refuses Unordered.
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
//	                     version, joined, live: its liveness subject), rewritten every
//	                     heartbeat; purged on the revision of its last heartbeat by a member
//	                     that found it gone (Liveness)
//	l.<topic>.p<n>       the lease of partition n: JSON LeaseInfo (owner, acquired, renewed,
//	                     live), created with a compare-and-set on the key's last revision,
//	                     renewed with an update on the revision, released with a delete on the
//	                     revision; an unrenewed lease expires with the bucket's MaxAge; a
//	                     fenced group's next owner purges it on its revision when its holder
//	                     was found gone (Liveness)
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
// until the holder releases it or it expires (or, in a fenced group, until the holder is
// found gone: Liveness). On a handoff the old owner stops fetching,
// finishes the running handler and returns the fetched but unstarted events to the server
// (Subscription.Stop; Drain handles them instead), then releases the lease. The new owner
// subscribes to p with the Bus's SubscribePartition; the Bus pins each partition's consumer
// to one client (priority group "jetbus", policy pinned_client), a second fence. An owner that cannot renew its lease stops the partition at once.
//
// # Liveness
//
// A crashed member is found out from what the NATS server knows, not only from its TTL. Each
// member subscribes to a subject of its own, LiveSubject: "$JETBUS.LIVE.<group>.<member>", on
// the connection it uses for KV, and answers the requests sent there. Once a probe of its own
// was answered (the server routes probes to it and lets it reply: NATS permissions), it
// advertises the subject in its member key and its leases; a member that advertises none (an
// older version during a rolling upgrade, or permissions without the subject: it logs a
// warning) is never probed, and its crash is seen when its key expires, as before.
//
// A member whose key was not rewritten for Suspect (5/4 of a heartbeat) is probed by each of
// the others, with a request to its subject:
//
//   - An answer: it is alive.
//   - No answer within Probe (500 ms): it may be stopped with its connection open — a GC
//     pause, a stopped or overloaded process — or the prober's own connection is down.
//     Nothing is concluded: it is probed again, and only its TTL removes it. A 1 s pause thus
//     costs nothing.
//   - "No responders": the server knows no subscription on the subject: the member's
//     connection is gone. A member that is reconnecting looks the same for as long as its
//     reconnect takes, so a second probe, the member's confirm window after the first, must
//     find no responders too, with no heartbeat of the member seen in between. Each member
//     advertises how long its reconnect takes at most (MemberInfo.Reconnect: its
//     connection's ReconnectWait plus its jitter, after which it tries a server it already
//     tried again; a cluster's clients reconnect to another node at once), and its confirm
//     window is that plus 250 ms, at least 500 ms: 600 ms for jetbus's processes (250 ms
//     plus up to 100 ms of jitter), 2.35 s for a nats.go connection with its defaults;
//     ConfirmWindow (1.25 s) for a member that advertises none. A member whose heartbeats
//     were on time when its connection dropped is first probed no sooner than Suspect minus
//     a heartbeat (62 ms) after the drop, so a reconnect of up to its window plus 62 ms is
//     not taken for a death (the window alone if its heartbeats were late already).
//
// A member found gone is removed: its key is purged with a compare-and-set on the revision of
// its last heartbeat (a heartbeat landing meanwhile makes the purge fail), every watcher sees
// it expire, and the assignment moves its partitions. The two probes must be sent on one
// unbroken connection of the prober, and after a reconnect of its own a member probes only once
// it has been connected for ConfirmWindow: the server it reconnected to may be restarting and
// not know the other servers' subscriptions yet, and members reconnecting after one outage
// come back within about a second of each other. A member that just started probes at once
// (a replica replacing a crashed one is often the only other member): it joined through the
// group's bucket, so its server reaches the cluster. Probes assume that the members of a
// group are clients of one cluster (routes), whose servers know each other's subscriptions.
//
// The lease. In a fenced group (Config.Fenced), the next owner of a partition whose holder
// has left the member list probes the holder's subject (in the lease) and, on "no responders",
// purges the lease with a compare-and-set on its revision and takes it (Previous
// LeaseExpired): a crashed member's partitions resume about 1 s after its last heartbeat
// when it is one of jetbus's processes (Suspect + its 600 ms confirm window, the probes'
// ticks, a few KV round trips; about 1.6 s with ConfirmWindow) instead of after the lease
// TTL. Should the verdict be wrong (a reconnect longer than the window), the holder finds
// its lease's revision moved at its next renewal and stops at once; until then both
// may handle the partition, which a fenced handler tolerates (the version guard, the
// checkpoint fence), as it tolerates the overlap of any take-over.
//
// An unfenced group removes a crashed member as early, so the assignment moves at once, but
// its next owner still waits for the lease to expire (TTL) and then for the dead owner's
// deliveries to time out (AckTimeout, see Timeouts). Server-confirmed death does not make
// that wait safe to skip. It is true that a process that died has no handler running, that
// its pulls ended with its connection and that its deliveries come back only after AckWait
// (or at once by the Bus's take-over); but "no responders" says that the holder's connection
// is gone as the prober's server sees it, not that the holder's process stopped. A process
// cut off from the cluster (a network partition, a reconnect longer than the window, a
// connection the server closed), or whose Bus consumes on another connection, still runs the
// handler it started and may fetch on until its guard fires (4·TTL/5 after its last renewal);
// exclusivity rests on that guard firing before the lease can expire and on the wait for its
// deliveries, both of which an early take-over would skip.
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
//	heartbeat interval = min(TTL/3, 250ms)  a member silent for TTL expires
//	lease TTL          = TTL                (the same bucket's MaxAge)
//	renew interval     = TTL/3
//	guard              = 4·TTL/5            an owner whose last successful renewal was sent
//	                                        this long ago stops the partition, before the
//	                                        server can expire the lease
//	suspect            = 5/4 heartbeat      a member silent this long is probed (Liveness)
//	confirm            = reconnect + 250ms  two "no responders" this far apart: it is gone
//	                                        (the member's advertised reconnect, at least
//	                                        500ms; ConfirmWindow when it advertises none)
//
// After a graceful leave or handoff the next owner starts at once (about one KV round trip
// per step). After a crash of a member that advertises a liveness subject, it is removed
// Suspect plus its confirm window after its last heartbeat (about 1 s for jetbus's
// processes) whatever the TTL, and a fenced group's partitions resume then
// (Liveness). Otherwise the member and its leases expire within TTL of their last write; an
// unfenced group's next owner then waits, if the dead owner had deliveries in flight, until its last
// delivery is older than the subscription's AckTimeout (plus a tenth and 200ms for the
// server's redelivery timer), so that those events are redelivered first and per-key order
// holds. Relation to AckTimeout: a handler must return within
// AckTimeout (otherwise its event is redelivered anyway); under that condition no partition
// is ever handled by two members at once, and a crashed member's partitions resume within
// max(TTL, AckTimeout) plus a KV round trip. Choose TTL well above the KV round-trip time
// (a loaded cluster needs seconds, not hundreds of milliseconds). A handler whose effects are
// fenced or idempotent (Config.Fenced: the projections) does not need that exclusivity: its
// partitions resume once the crashed member was found gone (Liveness) or its leases expired
// (TTL), the Bus's take-over returning the unacknowledged deliveries first, in order.
//
// The default TTL stays 5 s. With Liveness a crash no longer waits for it; what still does is
// a member that stops with its connection open (a process stopped or hung, a pause of seconds)
// and a member without a liveness subject. A TTL of 3 s would resume those 2 s sooner, at a
// cost: the guard becomes 2.4 s, so a KV leader election or a loaded cluster whose round trips
// approach a second makes owners stop their partitions (and the next owners wait) where 5 s
// rides it out, and renewals rise by 5/3. The heartbeat is 250 ms instead of TTL/3 (1.67 s):
// it bounds how soon a crash is suspected (Suspect, 312 ms after the last one), and costs four
// KV writes a second per member and topic. With 500 ms, a crashed projector's partitions
// resumed up to about 0.4 s later in the e2e SIGKILL scenario.
package partition
