// Package projection materializes topics into MongoDB: a changelog projection keeps one
// document per event key in a collection (configured, no Go needed); a transactional
// projection runs a Go handler whose writes commit together with the partition's checkpoint.
// It also rebuilds a changelog projection into a new collection and switches readers to it.
//
// It owns the view documents, their history (<collection>_history), the applied positions
// (jetbus_checkpoints), the live-generation records (jetbus_projections) and the
// transactional owners' session records (jetbus_owners); docs/views.md is the contract
// readers rely on. It does not own consuming (package partition splits the partitions
// between replicas, the Bus delivers), dead letters (package dlq), schemas (a registry's
// upcaster is passed in as a middleware) or serving views (package snapshotapi).
//
// # How a batch is written
//
// A projection consumes its topic (and FanIn topics) as one consumer group through
// partition.Subscribe with ManualAck deliveries. Each owned partition holds what it was
// delivered and writes one batch at a time, so a partition's writes are in stream order.
// Batches adapt to the load: a batch is written when BatchSize events are held (an upper
// bound, default 500) or its oldest waited Linger (default 5ms), so under a backlog batches
// fill up to BatchSize while the previous one is written, and a quiet topic's event waits
// at most Linger. After the
// write succeeded, what it refused is dead-lettered (reason "projection") and the whole batch
// is acknowledged with one AckBatch. Nothing is acknowledged before its write landed: a
// transient failure (network, not primary, write concern, timeouts) retries the batch with
// backoff, so it is neither redelivered nor lost: every third of AckTimeout, a partition
// restarts the ack timeout (InProgress) of everything it holds, the batch being written and
// the deliveries waiting behind it, however long MongoDB stays slow or down. (A delivery
// redelivered on each ack timeout would reach MaxDeliver, and the server would give it to the
// dead-letter queue through its MAX_DELIVERIES advisory while the projection still writes it.)
//
// Changelog batches are coalesced per key: replace mode writes only a key's last event;
// merge mode folds a key's events into one update pipeline; a tombstone resets the key. All
// keys of a round go into ONE unordered BulkWrite. Every write carries the version guard
// ({$lt: ["$_v", version]} inside an update pipeline), so a redelivery, a replay from the
// earliest event, or a partition that moved mid-batch is skipped by MongoDB itself, never
// applied and never an error. A stale event costs a no-op write, not a read (with a Version
// pointer, one read of the versions of a round's keys when some of its writes changed
// nothing: see below).
//
// # Versions from the payload
//
// With Config.Version a producer chooses the versions, so they are bounded: an integer from
// 0 to math.MaxInt64 (anything else is dead-lettered as it is decoded), and at most
// Config.MaxVersionStep above the key's stored version — further, the event is dead-lettered
// and the key keeps its version, so that one event (2^63-1 after 5) cannot make every later
// event of its key stale. A key with no stored version takes any version. A batch keeps, per
// key, the events that apply in stream order, each newer than the one before and within the
// step of it; the guard also carries the floor (the first event's version minus the step:
// {$gte: [{$ifNull: ["$_v", floor]}, floor]}), so a write whose first event is too far above
// the stored version changes nothing. Such a write is told from a stale one by reading the
// stored versions of the round's keys after it — only when the round's writes did not all
// apply, and not for keys whose versions were read before writing (with history, or when a
// key's versions jump by more than the step within the batch) — and its key's events are
// judged again over the stored version. A replay judges every event again over what is
// stored then: an event refused once may apply later, once its key's version came within
// the step of it (as a replay of its dead letter would).
//
// # Choices, and why
//
//   - Version guard inside the write, not a read-then-write: it is atomic per document, costs
//     no round trip, and two owners racing on a key cannot move it backwards.
//   - Deleted keys leave a marker {_id, _v, _ts, _topic, _deleted: true}: without it a late
//     older event (a replay, a producer's out-of-order event) would bring a deleted key back.
//     With Tombstones "delete" the marker expires after DeletedRetention (TTL index on
//     _expires); readers treat a marker as absent (docs/views.md).
//   - Data errors are per event: MongoDB's codes for a document it refuses (too large, $ or
//     dotted names, a secondary unique index clash, validation) dead-letter the event that
//     caused them; a coalesced write MongoDB refuses is split into single writes to find the
//     culprit. Payloads that cannot be a document (not an object, reserved or illegal field
//     names, too deep, numbers out of range) are refused before writing. A clash on _id is
//     two upserts racing and is retried, not dead-lettered.
//   - A secondary unique index is partial (only documents having its fields), so markers
//     never clash.
//   - The checkpoint {_id: "<group>/<topic>/p<n>", seq} is advanced with $max after each
//     changelog bulk write: readers (read-your-writes) wait on it; a zombie never moves it
//     back. A transactional projection moves it inside its transaction, conditionally on the
//     seq it read (the fence): a zombie's commit fails (ErrFenced) and nothing of it applies.
//   - A transactional partition's new owner kills the previous owner's recorded session
//     (killSessions), so a crashed owner's open transaction does not hold the checkpoint's
//     lock until the transaction lifetime ends. TransientTransactionError reruns the whole
//     transaction; UnknownTransactionCommitResult retries the commit only.
//   - Rebuild builds generation N+1 ("<collection>-g<N+1>", group "<name>-g<N+1>") beside the
//     live one and switches readers with one conditional write of the live record in
//     jetbus_projections (an alias, not a rename: a rename cannot replace a collection
//     atomically while readers use it, and an alias keeps the previous generation readable
//     for a grace period). Running projectors follow the record within a second.
//   - A partition that stops (SIGTERM, or handed to another replica) writes and acknowledges
//     what it holds within StopTimeout before its subscription stops and its lease is
//     released, so the next owner never races a write of this one.
//   - A crashed replica's partitions resume once its leases expired (TTL, 5s by default), not
//     after its deliveries timed out (AckTimeout, 30s): projections subscribe with
//     partition.Config.Fenced, because a replica that lost its partition while stalled can
//     race the next owner harmlessly (the version guard, the checkpoint fence). The Bus's
//     take-over returns the crashed replica's deliveries first, in order.
//
// # Tracing
//
// With a tracer provider that records (WithTracerProvider), each attempt at writing a batch
// is a client span "projection write <projection>" (db.system.name mongodb, db.namespace,
// db.collection.name for a view, db.operation.name bulkWrite or commitTransaction,
// messaging.batch.message_count, jetbus.attempt), linked to the span of each event of the
// batch (its delivery's consumer span): at most 128 links, the sampled events' first; the
// sampled ones beyond are linked from child spans "projection links <projection>" (128
// each), and unsampled ones that do not fit are counted in jetbus.links_dropped. Its parent
// is the span of the batch's first sampled event: every sampled event reaches its batch's
// write through the parent or a link, whatever the batch's size, and a batch of one event is
// its child. A dead letter of a batch's event is written in that event's trace, and
// a transactional handler's ctx carries its event's span.
//
// # Metrics
//
// projection_events_total{projection,outcome} (written, coalesced, stale, skipped,
// dead_lettered), projection_writes_total{projection,result} (applied, stale: the version
// guard kept a newer document; a write refused by the step's floor is neither, its events are
// dead_lettered), projection_batch_size, projection_write_seconds (one bulk
// write or one commit), projection_retries_total, projection_fenced_total,
// projection_out_of_order_total (deliveries the Bus handed a partition after a later event:
// the view misses them; it should stay 0),
// projection_lag{projection,topic,partition}, projection_generation and
// projection_rebuild{projection,what} (done, total, rate, eta_seconds, generation).
package projection
