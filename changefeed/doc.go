// Package changefeed publishes MongoDB changes into jetbus topics, none lost and none
// doubled: a feed turns a change stream (of a collection, a database or the whole
// deployment) into events, and a drainer publishes the events an application wrote into an
// outbox collection inside its own transactions (AppendOutbox).
//
// It owns the mapping from changes to events, the feeds' saved positions (KV bucket
// jetbus_changefeeds), the copy of existing documents, what happens when a position is no
// longer in the oplog, and the outbox's document shape and drainer. It does not own
// publishing, validation or partitioning (the Bus, package jetstream, with the schema
// registry's publish middleware installed by the caller), dead-letter storage (package dlq:
// Queue.Reject), the lease's compare-and-set mechanics (package partition), the retry rule
// (internal/retry), or the creation of topics (the process, from its configuration).
//
// # Events
//
// A change of a document becomes one event on the feed's topic (Config.Topic, or per
// collection with the placeholders {collection} and {database}):
//
//   - Key: the document's _id, written canonically (Key): an ObjectId as its 24 hex digits, a
//     number as its exact value in decimal without exponent or trailing zeros (so 7, 7.0 and
//     NumberDecimal("7.00"), which MongoDB's unique index holds equal, give "7"), a string
//     as is unless it could be read as one of those or as JSON (then JSON-quoted: the string
//     "7" is the key "\"7\""), anything else as canonical Extended JSON. Two documents
//     never share a key: the string "64b7…18" and ObjectId("64b7…18") are two keys. The key
//     orders and partitions the events of a document. A feed of several collections into
//     one topic should have _ids unique across them, or use {collection}.
//   - ID (Nats-Msg-Id): "<feed>:" and 32 hex digits of SHA-256 of the change's resume token,
//     so the same change read again yields the same ID; a copied document's is
//     "<feed>:copy:<epoch>:" and a hash of its namespace and key.
//   - TS: the change's wallTime (clusterTime's seconds before MongoDB 6); a copied
//     document's, when it was read.
//   - Headers x-cdc-op (insert, update, replace, delete, read — a copied document) and
//     x-cdc-ns ("<db>.<coll>").
//
// Format document (the default) publishes the document after the change; a delete is a
// tombstone (JSON null). With fullDocument updateLookup (the default) MongoDB looks the
// document up when the change is read, so an update carries the state at that time, not
// the state the update produced; an update of a document deleted since carries null (a
// tombstone: that is its state). whenAvailable uses the post-image MongoDB recorded with the
// change when the collection records them (changeStreamPreAndPostImages) and looks the
// document up itself otherwise; required makes MongoDB fail the stream without one.
//
// Format envelope publishes Debezium's shape, with the same JSON mapping:
//
//	{"op": "c"|"u"|"d"|"r",            Debezium's code: create, update (and replace), delete, read (copy)
//	 "operationType": "insert"|…|"read",  MongoDB's operation
//	 "key": "<canonical key>",
//	 "before": {…}|null,                the pre-image, when the collection records them
//	 "after": {…}|null,                 the document after the change (null for a delete)
//	 "updateDescription": {"updatedFields": {…}, "removedFields": […], "truncatedArrays": […]}|null,
//	 "source": {"feed", "ns": {"db", "coll"}, "clusterTime": {"t", "i"}, "ts_ms",
//	            "txnNumber", "lsid", "snapshot": true for a copy},
//	 "ts_ms": <when the feed rendered it>}
//
// The envelope asks MongoDB for pre-images (fullDocumentBeforeChange: whenAvailable), which
// needs MongoDB 6.0 or later. A delete in the envelope format is an event, not a tombstone. Debezium puts the document
// in after as a string of Extended JSON; here it is the JSON below, like every payload.
//
// Documents become JSON (Payloads): objects keep their field order; strings, booleans,
// null, int32, int64 and doubles are JSON's own (NaN and the infinities as the strings "NaN",
// "Infinity", "-Infinity"); an ObjectId is its hex string; a date is an RFC 3339 string with
// milliseconds in UTC; Decimal128 is its decimal text; a UUID (binary subtype 3 or 4) is its
// canonical string, other binary base64; a timestamp is {"t", "i"}; a regular expression
// "/pattern/options"; MinKey and MaxKey the strings. This is lossy where JSON has no type
// (a date and a string look alike), as MongoDB's Kafka connector's SimplifiedJson is, and
// chosen for the same reasons: consumers, JSON Schemas and projections read plain values,
// and no field name starts with "$" (which projections refuse).
//
// Changes that touch no document (drop, rename, dropDatabase) are not published; the
// position moves past them. An invalidate (the watched collection dropped or renamed, the
// database dropped) ends MongoDB's stream; the feed opens it again after the invalidate
// event (startAfter), so it follows a collection created again under the name.
//
// # None lost, none doubled
//
// Changes are published in stream order with the Bus's PublishAsync, at most
// Config.MaxInFlight awaiting acknowledgement. Acknowledgements are taken in the same order,
// so the position the feed keeps — and saves in KV, every SaveInterval while changes flow —
// is the resume token of the highest change whose publish and every publish before it were
// acknowledged. A runner that dies loses at most what was acknowledged since its last save
// and what was in flight; the next one reads them again from the saved token, and JetStream
// drops the publishes it already stored, by ID. That holds while the next runner starts
// within the topic's duplicate window (topics' duplicate_window, 2 minutes by default; a
// standby takes over within about LeaseTTL): a feed down for longer re-publishes those few
// changes as new events. Saves are compare-and-set on the key's revision, so a runner that
// lost its lease cannot overwrite its successor's position.
//
// A publish that fails (no acknowledgement within 10 seconds, a stream gone) stops the
// runner: it waits for what is in flight, then starts again from its acknowledged position.
// The changes that were in flight are then published one at a time, and if the server
// reports one as already stored after a change of the same key it stores only now (a
// publish lost while a later one landed, as in a leader change), that later change is
// published once more with the ID suffix "~r", so every key's last event is its latest
// change. Per-key order therefore holds through failures; a process killed mid-flight cannot
// lose an earlier publish while a later one lands (its connection delivers in order), so a
// restart needs no such repair.
//
// # One runner per feed
//
// A feed's runners share a lease — package partition's, as a group of one partition
// "changefeed_<name>" in bucket jetbus_group_changefeed_<name> — taken with a
// compare-and-set and renewed every LeaseTTL/3. The holder publishes; every other runner is
// a hot standby watching the lease key, and takes over, from the saved token, when the
// holder releases it (a graceful stop) or it expires (LeaseTTL after the holder's last
// renewal). A holder that cannot renew stops publishing at 4/5 of LeaseTTL, before the lease
// can expire, so two runners never publish at once.
//
// # Start, copy and lost history
//
// A feed without a saved position starts by Config.Start: latest (changes from now on; the
// position is saved at once, so a restart before the first change loses nothing), timestamp
// (changes at or after StartAt, startAtOperationTime) or copy_existing. A copy first captures
// the stream's start point (MongoDB's post-batch resume token of a new stream), then reads
// every collection it covers in _id order — through an aggregation that shapes each document
// as an insert event, so the feed's pipeline filters the copy as it filters the stream —
// and publishes each document (op read), saving the last acknowledged _id as it goes; then it
// streams from the captured point. A document changed during the copy therefore ends with
// its latest state: its changes follow its copy. Such a document (written while the copy
// runs) is published twice, as read and as its change, under different IDs — the copy and
// the stream cannot know of each other; every document written after the copy ends is
// published once. A restart continues the copy after the
// saved _id (a range compares within one BSON type, so the types that sort later are added
// by $type), with the same epoch: documents published twice are dropped by ID. Progress is
// in the saved position (copied, estimated total), Status and the metrics.
//
// When the saved position is no longer in the oplog (ChangeStreamHistoryLost, 286, or
// InvalidResumeToken, 260), Config.OnHistoryLost decides, and it is never silent:
// fail (the default, as Debezium) keeps the lease, publishes nothing, reports ErrHistoryLost
// from Ready (/readyz fails), sets changefeed_failed and counts
// changefeed_history_lost_total, and logs what to do — delete the feed's key in
// jetbus_changefeeds (ResetPosition, or `nats kv del jetbus_changefeeds <feed>`), after
// which the feed starts again by its Start mode; latest continues with new changes (the
// lost ones are not published; logged at error level, counted, and stamped in the position
// as history_lost); recopy copies everything again under a new epoch, then streams. A copy
// that outlasts the oplog loses its start point the same way.
//
// Heartbeats: while no change arrives, each quiet wait of the stream (at most a second)
// returns MongoDB's post-batch resume token, which moves with the oplog; the feed saves it
// every Config.Heartbeat (a token that came too soon after the last save is saved a
// Heartbeat later even if the stream stays still). A feed of a quiet collection thus keeps a position the oplog still
// holds while other collections churn. Unlike the Kafka connector's and Debezium's
// heartbeats this publishes nothing and is on by default.
//
// # What cannot be published
//
// A change too large for the server, refused by its topic's schema (the registry's publish
// middleware), with a key that cannot travel in a header (over 1024 bytes, control
// characters), or routed by a template to a topic that is not a valid name or does not
// exist, goes to the DLQ (WithDeadLetters; Queue.Reject, reason "changefeed", group
// "changefeed-<name>", original subject "changefeed.<name>", the event's ID so a second
// rejection after a restart is stored once) with its key and the error; the feed continues.
// The dead letter holds the change's payload, so it can be replayed once the schema or topic
// is fixed; for a change too large, a summary instead (operation, namespace, key, cluster
// time, size). Any other failure — a server unavailable, the fixed topic's stream deleted —
// stops the feed until it goes away, and nothing is skipped; without a DLQ, so does a change
// that cannot be published.
//
// # The outbox
//
// AppendOutbox writes {_id: event ID, topic, key, payload (the JSON text), headers, ts} (and
// sid, caused_by, tags, and traceparent and tracestate: the trace context of ctx's span) with
// the caller's context: inside session.WithTransaction the event exists if and only if the
// transaction commits. A drainer (NewDrainer, one active per
// outbox by the same lease, kind "outbox") tails the collection with a change stream, never
// by polling: on taking the lease it opens the stream, publishes the pending documents in
// (ts, _id) order, then the inserted ones, each with Msg-Id = _id (a string as it is, any other type as Key
// writes it: an ObjectId as its hex), and after the
// acknowledgements deletes them (after: delete) or sets sent: <date> (after: mark), which a
// TTL index on sent expires after the retention. The collection is its own position: a
// document is pending until it is deleted or marked, so a crash between the publish and the
// delete publishes it again and JetStream drops the copy; an aborted transaction wrote
// nothing, so nothing is published. Order per key is the order in which the appends'
// transactions committed (the change stream's), and (ts, _id) for the documents pending when a
// drainer starts. Documents written
// by other means are checked like any outside input: one without a topic, with a payload
// that is not JSON (a string of JSON, or any BSON value, which is rendered as above),
// headers that are not strings or are reserved, or a bad key, is dead-lettered (group
// "outbox-<name>") and removed. A traceparent or tracestate that is not a valid string is
// left out, never a reason to dead-letter.
//
// # Tracing
//
// Feeds and drainers publish through the Bus, whose "publish <topic>" producer span is the
// span of each publish when it traces: a changefeed's is a root (a change stream carries no
// trace context); a drainer's is a child of the document's traceparent, so the event
// continues the trace of the transaction that appended it. A dead letter keeps the
// document's trace context.
//
// # Operations
//
// Feed and Drainer are process components: Name, Run, Ready (a standby is ready; a failed
// runner is not, nor one that has been failing without progress for 30 seconds) and Status (role, lease
// owner, saved position with copy progress, counts, last error) for /v1/ops/status. Metrics
// (WithRegisterer; label feed): changefeed_changes_published_total,
// changefeed_dead_letters_total, changefeed_duplicates_total, changefeed_lag_seconds (now
// minus the cluster time of the last change read), changefeed_position_age_seconds (now
// minus the cluster time of the saved position), changefeed_copy_documents_total,
// changefeed_copy_progress_ratio, changefeed_history_lost_total, changefeed_failed; for
// drainers outbox_events_published_total, outbox_dead_letters_total,
// outbox_duplicates_total, outbox_lag_seconds.
package changefeed
