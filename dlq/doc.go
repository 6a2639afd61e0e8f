// Package dlq keeps failed events: a handler middleware that moves an event the handler cannot
// process to the dead-letter stream, a safety net for handlers that never returned, per-key
// parking, and the tools to inspect, replay and discard dead letters.
//
// # Wire format
//
// Dead letters live in one stream, DLQ, on subjects "dlq.<topic>". A dead letter keeps the
// original body and headers and adds x-dlq-reason, x-dlq-error, x-dlq-group, x-dlq-attempts,
// x-dlq-original-subject, x-dlq-original-stream, x-dlq-original-seq, x-dlq-original-id and
// x-dlq-ts (Unix ms). Its Nats-Msg-Id is "dlq:<stream>:<seq>:<group>", so moving the same
// delivery twice (the middleware and the safety net, or a retry after a lost acknowledgement)
// stores it once within the DLQ's duplicate window (default 24h).
//
// Reasons: "max-attempts" (the handler failed on its last attempt), "permanent" (it returned
// jetbus.Permanent), "decode" (the body is not JSON; the handler was never called),
// "max-deliveries" (the server gave up on a delivery whose handler never returned: crashed,
// hung or timed out; moved by the safety net), "parked" (an earlier event of the same key is
// dead-lettered in this group and parking is on), "projection" (a projection could not apply
// the event to its view; Queue.DeadLetter).
//
// Messages refused before they reached a topic — by ingress ("ingress") or a changefeed
// ("changefeed") — are kept too (Queue.Reject), with the component as the group, the source
// subject as x-dlq-original-subject and no original stream. A changefeed's go to dlq.<topic>
// (dlq._unrouted without a valid topic). Ingress's — refused client traffic, a flood of it
// maybe — go to a stream of their own, DLQ_REJECTS, on dlq_rejects.<topic>
// (dlq_rejects._unrouted without a valid topic; dlq_rejects._other, with the topic in
// x-dlq-topic, for a topic ingress does not serve, so that invented names make no subjects;
// Filter.Topic finds them there), bounded apart (Config.Rejects: 256 MiB and 7 days in the
// processes): a flood of refusals ages out older refusals, never a handler's dead letter. A
// refusal's Nats-Msg-Id is "dlq:rejected:<group>:<the message's ID>" (an ID over 64 bytes as
// "sha256:" and its SHA-256 in hex), so a client's retry of a refused message is stored once;
// DLQ_REJECTS remembers IDs for 2 minutes (RejectsDuplicateWindow), as the server keeps every
// ID of the window in memory. A refused body longer than Config.Rejects.MaxBody (64 KiB in the
// processes) keeps its first MaxBody bytes (so does one ingress cut to fit the server's max
// payload, whatever MaxBody: Rejected.BodySize, Rejected.BodySHA256), and the letter adds
// x-dlq-body-size and x-dlq-body-sha256 (the whole body's size and SHA-256, hex); such a letter
// cannot be replayed (ErrNotReplayable, even with Force). Inspection, replay and discard read
// both streams, the DLQ's first; a refusal's position prints as rejects:<seq>. Replaying one
// publishes it to its topic for every group; one that ingress refused is replayed only to a
// topic open to ingress at replay time (ReplayOptions.IngressTopics; `bridge dlq replay` passes
// ingress.allow), unless ReplayOptions.Force: ingress's allow list is what let a client publish
// there at all.
//
// # Guarantees
//
// The middleware publishes the dead letter and waits for the server's acknowledgement before
// the original is terminated. If the DLQ publish fails, the middleware returns an ordinary
// error: the original is neither acknowledged nor terminated and is delivered again; if that
// was its last attempt, the server stops delivering it and publishes a MAX_DELIVERIES
// advisory, which the safety net (Sweeper) captures into the DLQ_ADVISORIES stream and turns
// into a dead letter once the DLQ accepts it. Nothing is lost on either path.
//
// # The failure path, step by step
//
// What happens to an event whose handler fails, with this package's middleware installed
// (outermost) on the Bus:
//
//  1. The Bus delivers the event (Delivery.Attempt = the broker's delivery count) and runs
//     the handler chain.
//  2. The handler returns an ordinary error and Attempt < MaxAttempts: the middleware passes
//     the error on; the Bus naks the message with NakWithDelay(Backoff(Attempt)); the broker
//     delivers it again after the delay (step 1).
//  3. The handler returns jetbus.Permanent(err), or fails on its last attempt: the middleware
//     publishes the dead letter to dlq.<topic> and waits for the DLQ's acknowledgement; then
//     it returns Permanent(*DeadLetteredError) and the Bus terminates the original
//     (TermWithReason). The original is never terminated before the DLQ holds its copy.
//  4. The DLQ publish fails (stream deleted, cluster unavailable): the middleware returns an
//     ordinary error wrapping ErrDLQUnavailable; the Bus naks the original, which is
//     delivered again (step 1) while attempts remain. On the last attempt the broker stops
//     at MaxDeliver and publishes a MAX_DELIVERIES advisory.
//  5. The safety net: the advisory is captured in the DLQ_ADVISORIES stream (created by
//     Open before any delivery can run out); RunSweeper reads it, fetches the original by
//     stream and sequence and stores the dead letter with reason "max-deliveries", retrying
//     until the DLQ accepts it. The same path catches handlers that crashed, hung past the
//     ack timeout on every attempt, or ran in a process that died. An advisory is only a
//     message anyone allowed on its subject could publish, so nothing is copied before the
//     server confirms it: the stream is a topic's (never a KV or the DLQ's own), the message
//     is an event of that topic, the consumer is the jetbus consumer of its partition, it
//     delivered the message MaxDeliver times and has not acknowledged it. Others are dropped
//     and counted (dlq_advisories_refused_total).
//  6. A body that is not JSON never reaches the handler: the Bus marks the delivery with
//     DecodeErr and the middleware dead-letters it at once with reason "decode" (step 3).
//
// # Replay
//
// Replay republishes a dead letter to its original topic through the normal publish path
// (validated, partitioned by key), with a new event ID derived from the dead letter
// ("replay:<stream>:<seq>:<group>", so replaying twice stores one event) and caused_by set to
// the original event's ID. Before republishing, it records in the KV bucket ReplayBucket that
// this event ID is meant for the group it failed in, with the topic, key and SHA-256 of the
// body it publishes: the middleware of every other group acknowledges the event without
// calling the handler, so only the group that failed sees it again. A delivery with that ID
// whose topic, key or body differ (someone published another event with the replay's ID) is
// an ordinary event, delivered to every group, counted in dlq_replay_mismatches_total{topic,
// group} and logged. The dead letter is removed once the republish is acknowledged.
//
// No header decides this. jetbus reserves the header prefixes "x-dlq-" and "x-jetbus-"
// (jetbus.ReservedHeaderPrefixes): Publish refuses them, and consumers never act on them, so
// a publisher — through the Bus or with a raw NATS client — cannot make a group skip an event.
// Only a client allowed to write the replay bucket could; see README for the permissions
// that keep untrusted clients to ingress subjects.
//
// Replay streams, whatever the DLQ holds: it reads a fetch of letters at a time (500 letters,
// 2 MiB) and replays them a chunk at a time (ReplayChunk letters, 4 MiB; the letters of one
// topic and key one after the other, in order, up to 64 keys at once), so its memory is
// bounded; a million letters replay within about 30 MiB. The report keeps counts and the first
// MaxReportedFailures failures (ReplayOptions.OnLetter sees every letter). Later letters of a
// group, topic and key whose letter failed are held back (a key's order is a topic's: its
// letters of other topics or groups go on), for at most MaxBlockedKeys keys
// (ErrTooManyFailures past them). Each letter is removed once its republish is stored, so an
// interrupted replay loses nothing and replays nothing twice: ReplayReport.Resume is where a
// later replay (Filter.From) goes on. Each, Count and Discard stream the same way; List returns
// what it read, so it holds at most its limit.
//
// # Parking
//
// With parking on, once an event with key K is dead-lettered in group G, later events of K in
// G are not handled: they are moved to the DLQ behind it with reason "parked", so per-key
// order survives failures. Replaying (or discarding) the key's dead letters in order releases
// it. Parking state lives in the KV bucket jetbus_dlq_parked, key "<group>.<stream>.<key in
// base64url>", shared by every member of the group.
//
// This package does not decide when an event has failed: the Bus's attempt counting and
// jetbus.Permanent do.
package dlq
