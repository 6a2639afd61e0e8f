// Package minimongo is an in-process server speaking the MongoDB wire protocol, for tests
// only. The official Go driver (go.mongodb.org/mongo-driver/v2) connects to it over TCP on
// loopback exactly as it connects to MongoDB, and sees the primary of a one-member replica
// set with sessions, retryable writes, transactions and change streams.
//
// Production code targets a real MongoDB; nothing outside tests may depend on this
// package. Tests normally reach it through embeddedtest.Mongo, which switches to a real
// deployment when JETBUS_TEST_MONGO_URI is set. The conformance suite in package mongotest
// runs the same assertions against both.
//
// What is supported behaves as MongoDB 7/8 does: results, error codes, code names, error
// labels, write errors. What is not supported fails loudly with MongoDB's own errors and is
// never silently ignored: an unknown command gets CommandNotFound (59), an unknown query
// operator BadValue (2) naming it, an unknown update modifier FailedToParse (9), an unknown
// aggregation stage 40324, an unknown command field 40415; operators, stages and options
// that MongoDB has but this server does not implement get BadValue (2) with a message
// "minimongo does not support ..." naming them.
//
// # Wire protocol
//
// OP_MSG (opcode 2013) with a body section (kind 0) and document sequences (kind 1), the
// checksumPresent flag (CRC-32C verified) and moreToCome requests (no reply, as for w:0
// writes). OP_QUERY is answered only for the legacy isMaster/hello handshake, with
// OP_REPLY. No compression is advertised; OP_COMPRESSED closes the connection.
//
// # Commands
//
//   - hello / isMaster: isWritablePrimary, setName, hosts, primary, me, setVersion,
//     electionId, topologyVersion, lastWrite, logicalSessionTimeoutMinutes (30),
//     maxWireVersion 21 (MongoDB 7.0), limits, $clusterTime and operationTime. Awaitable
//     hello (topologyVersion + maxAwaitTimeMS) waits as the driver's monitor expects, but
//     at most 500 ms, so that a check started just after an application error cannot
//     stall the driver's retry for a whole heartbeat interval.
//   - ping, buildInfo, endSessions, refreshSessions, killSessions (aborts the sessions'
//     open transactions), listDatabases (filter, nameOnly),
//     listCollections (filter, nameOnly), create (with changeStreamPreAndPostImages and
//     validators), drop, dropDatabase, getMore, killCursors, count (query, skip, limit,
//     hint).
//   - renameCollection within a database (dropTarget; documents, indexes, options and UUID
//     move with the collection); collMod with changeStreamPreAndPostImages, validator,
//     validationLevel and validationAction. Validators are query filters, applied as
//     strict, moderate or warn, skipped with bypassDocumentValidation, failing a write
//     with DocumentValidationFailure (121, errInfo.failingDocumentId; no errInfo.details).
//   - insert; update with many statements, upsert, multi, replacement documents, pipeline
//     updates, arrayFilters, hint and let; delete (limit 0 or 1, let); ordered and unordered
//     execution with writeErrors carrying their index; n, nModified and upserted as MongoDB
//     reports them; _id generated as an ObjectId and stored first; '$'-prefixed field names
//     in _id refused (52). As in 7.0, an update statement's sort is an unknown field (40415).
//   - A document larger than 16 MiB (maxBsonObjectSize), however it would be written (insert,
//     update, replacement, pipeline update, upsert, findAndModify), is refused with
//     BSONObjectTooLarge (10334), a write error of that statement only.
//   - Write concerns: every command that takes one runs, then reports a w greater than one
//     as writeConcernError UnsatisfiableWriteConcern (100) and a tag set as
//     UnknownReplWriteConcern (79), as the primary of a one-member replica set does.
//   - find: filter, sort, skip, limit (negative: single batch), projection (inclusion,
//     exclusion, dotted paths, aggregation field paths and $literal), batchSize,
//     singleBatch, hint, noCursorTimeout, let; cursors continued with getMore.
//   - findAndModify: query, sort, update (operators, replacement or pipeline), remove, new,
//     upsert, fields, arrayFilters, let. distinct (arrays unwound, values deduplicated by BSON equality).
//   - aggregate with $match, $sort, $skip, $limit, $project, $addFields/$set, $unset,
//     $replaceRoot/$replaceWith, $count, $group ($sum, $avg, $min, $max, $first, $last,
//     $push, $addToSet, $count; _id from field paths, documents of expressions or
//     constants), $unwind (string or document form), $sortByCount, $lookup (from,
//     localField, foreignField, as; not the let/pipeline form) and $changeStream, with let;
//     a final $out (string or {db, coll}) or $merge (into, on, whenMatched replace,
//     keepExisting, merge, fail or a pipeline with $$new and let, whenNotMatched insert,
//     discard or fail; an 'on' other than _id needs a unique index, 51183), outside
//     transactions. $out replaces the target's documents with deletes and inserts (change
//     streams on the target see those; MongoDB renames a temporary collection over it),
//     refusing duplicate _ids before writing. Database-level aggregate ({aggregate: 1})
//     starts with $documents or $listLocalSessions (or $changeStream).
//     Expressions are field paths, $$ROOT/$$CURRENT/$$REMOVE, $$NOW, $$CLUSTER_TIME and the
//     command's let variables (also in query filters' $expr), literals, documents and arrays of
//     expressions, and the operators $literal $add $subtract $multiply $divide $mod
//     $concat $toUpper $toLower $eq $ne $gt $gte $lt $lte $cmp $and $or $not $cond $switch
//     $ifNull $size $arrayElemAt $in $type $max $min $mergeObjects $getField $setField
//     $unsetField $rand; other expression operators fail with 168.
//   - createSearchIndexes, updateSearchIndex, dropSearchIndex and $listSearchIndexes fail
//     with SearchNotEnabled (31082), as a MongoDB 7.0 server outside Atlas answers them.
//   - createIndexes (key, name, unique, sparse, partialFilterExpression,
//     expireAfterSeconds), listIndexes, dropIndexes (by name, names, key pattern or "*").
//   - commitTransaction, abortTransaction.
//   - configureFailPoint with the failCommand, failGetMoreAfterCursorCheckout and
//     onPrimaryTransactionalWrite fail points (see Fail points).
//
// # Queries
//
// $eq $ne $gt $gte $lt $lte $in $nin $exists $and $or $nor $not $regex (options i, m, s)
// $type (names, numbers, "number") $size $all (including $elemMatch members) $elemMatch
// $mod $expr (with the expression operators above) and $comment; dotted paths with array
// traversal and numeric indexes; MongoDB's array matching rules (an array matches a
// condition if it or any element does; null matches missing fields); the BSON comparison
// order across types (MinKey, null, numbers, strings, objects, arrays, binary, ObjectId,
// bool, date, timestamp, regex, MaxKey) with range operators comparing only within a type
// bracket; numbers compared by value across int32, int64, double and decimal128, NaN equal
// to itself and outside ranges. Sorting uses the smallest (ascending) or largest
// (descending) array element. Strings compare binary: the simple collation is accepted,
// other collations are refused.
// Partial index filters accept only the operators MongoDB allows there.
//
// # Updates
//
// $set $unset $inc $mul $min $max $setOnInsert $push ($each, $position, $slice, $sort)
// $pull (values, operator conditions, sub-queries) $pullAll $addToSet ($each) $pop $rename
// $currentDate (date or timestamp), applied in lexicographic path order as MongoDB 5+
// does; the positional operators $ (the first element of the array matched by the filter's
// conditions on that array), $[] (every element) and $[identifier] (the elements matching
// the identifier's arrayFilters entry, with MongoDB's checks that filters and identifiers
// name each other); replacement documents; upserts seeded from the filter's equality
// conditions; the errors MongoDB reports for type mismatches (14), conflicting paths (40),
// _id changes (66), non-viable paths (28). Pipeline updates run $set/$addFields, $unset,
// $project and $replaceRoot/$replaceWith (other stages: 72 "not allowed to be used within
// an update"); the document keeps its _id when the result has none.
//
// # Indexes
//
// Every index can be created, listed and dropped. Unique indexes, compound, sparse and
// partial ones included, are enforced on insert, update and upsert with MongoDB's
// duplicate key error (11000, "E11000 duplicate key error collection: db.coll index: name
// dup key: { k: "v" }", keyPattern and keyValue). Equality and $in filters on _id, and
// equality filters on all fields of a unique index, are answered from the index; other
// queries scan the collection. TTL indexes expire documents from a sweeper owned by the
// Server (Options.TTLInterval).
//
// # Sessions and transactions
//
// Logical sessions (lsid), retryable writes (lsid + txnNumber: a retried insert, update,
// delete or findAndModify returns the recorded reply and is not applied twice) and
// multi-document transactions (autocommit:false, startTransaction). A transaction reads a
// snapshot taken when it starts plus its own writes; commit is atomic and retrying a
// commit is idempotent. Writing a document (or taking a unique index key) that another
// open transaction wrote, or a document that changed after the snapshot, fails with
// WriteConflict (112) labelled TransientTransactionError, so session.WithTransaction
// retries; a write outside transactions waits until the transaction holding the document
// or unique key ends. Errors inside a
// transaction abort it (NoSuchTransaction, 251, afterwards). Transactions older than
// Options.TransactionLifetime are aborted. Collections a transaction creates (explicitly
// or by writing) and the indexes it builds on them are private to it until it commits and
// gone if it aborts; createIndexes on a collection that existed before fails with 263.
//
// Snapshot reads outside transactions (readConcern level "snapshot" on find, aggregate and
// distinct, optionally with atClusterTime, as snapshot sessions send them) read the state
// at one cluster time and report it as atClusterTime (in the cursor, or at the top level
// of distinct). The history a snapshot needs is kept for 300 s (MongoDB's
// minSnapshotHistoryWindowInSeconds); an older atClusterTime fails with SnapshotTooOld
// (239), a future one with InvalidOptions (72), and other commands refuse the snapshot
// read concern with InvalidOptions.
//
// # Fail points and error labels
//
// configureFailPoint (on admin) configures failCommand as MongoDB 7 does, so tests written
// against it also run against a real deployment started with enableTestCommands: modes
// off, alwaysOn, {times: n}, {skip: n} and {activationProbability: p}, with count in the
// reply; data.failCommands (matched by command aliases too, never configureFailPoint),
// failAllCommands, errorCode (message "Failing command via 'failCommand' failpoint",
// errorExtraInfo appended), errorLabels (replacing the server's, empty removing them),
// closeConnection, blockConnection with blockTimeMS (checked when the fail point fires),
// writeConcernError (added after a command that takes a write concern ran), appName (from
// the handshake's client metadata), threadName ("conn<n>"), namespace and
// failInternalCommands (no client of this server is internal).
//
// failGetMoreAfterCursorCheckout fails a getMore after it checked out its cursor with
// data.errorCode (default InternalError, 1), filtered by appName, namespace and
// threadName as failCommand is; the cursor is destroyed, and a change stream's getMore
// gets the labels MongoDB adds (ResumableChangeStreamError for resumable codes), so
// drivers resume. onPrimaryTransactionalWrite applies to retryable writes: without
// failBeforeCommitExceptionCode the write is applied and recorded and the connection is
// closed before the reply (closeConnection, default true), so the retry gets the
// recorded result; with it the write fails before anything is applied. It fires once
// per command (MongoDB: once per written statement). Other fail points are refused with
// BadValue naming them.
//
// As in MongoDB, a command waits while another command of the same session runs
// (session checkout): a retried commitTransaction waits for the commit a blockConnection
// holds.
//
// Replies carry the labels MongoDB's ErrorLabelBuilder adds: TransientTransactionError
// inside transactions, RetryableWriteError (and NoWritesPerformed) for retryable writes and
// commit/abort on retriable codes or write concern errors, ResumableChangeStreamError on
// change stream aggregates and on getMores that checked out their cursor (so not on a
// failCommand error of a getMore, as in MongoDB 4.4+, where the label comes from the
// cursor's originating command), and NonResumableChangeStreamError for 280 and 286.
// UnknownTransactionCommitResult is a driver's label and is not sent.
//
// # Change streams
//
// On a collection, a database (aggregate: 1) and the deployment (aggregate: 1 on admin with
// allChangesForCluster). Events: insert, update (updateDescription with updatedFields,
// removedFields and truncatedArrays), replace, delete, drop, dropDatabase, rename (ns and
// to; it invalidates streams on the source and the target collection) and invalidate,
// with documentKey, clusterTime, wallTime, and lsid/txnNumber for transaction writes,
// which appear at commit in order. Updates are described as MongoDB's document diff does:
// changed subdocuments and array elements field by field ("arr.2"), shortened arrays in
// truncatedArrays. With showExpandedEvents a stream also sees the DDL events create
// (explicit and implicit, not for collections a transaction creates), createIndexes,
// dropIndexes and modify (collMod) with their operationDescription, collectionUUID on
// every collection event, rename's operationDescription (to, dropTarget) and
// updateDescription.disambiguatedPaths. fullDocument default, updateLookup, whenAvailable and
// required; fullDocumentBeforeChange whenAvailable and required (pre- and post-images are
// recorded for collections created with changeStreamPreAndPostImages). Resume tokens are
// {_data: "<hex>"} ordered by cluster time, reported as each event's _id and as
// postBatchResumeToken; resumeAfter, startAfter (also after an invalidate) and
// startAtOperationTime. $match, $project, $addFields, $set, $unset, $replaceRoot and
// $replaceWith may follow $changeStream. getMore waits up to maxTimeMS (default 1 s) and
// wakes as soon as an event is recorded. The oplog keeps Options.OplogSize events;
// resuming from a point no longer held fails with ChangeStreamHistoryLost (286). A
// pipeline that modifies an event's _id fails with ChangeStreamFatalError (280).
//
// # Concurrency and lifetime
//
// One mutex guards all state, so any number of clients and cursors may run concurrently.
// Cursors idle for Options.CursorTimeout are killed. Close closes the listener and every
// connection, wakes every waiting operation and returns once all goroutines of the server
// have stopped.
//
// # Persistence
//
// Without Options.Dir all data lives in memory and is gone when the Server is closed. With
// a Dir (make dev keeps its data under ./data/mongo), the committed state survives a
// restart on the same Dir: databases, collections with their UUIDs, options and
// validators, index definitions (entries are rebuilt on load), documents in natural order
// and the oplog, so change streams resume across the restart from tokens handed out
// before it. Open transactions, sessions, cursors and fail points are not kept, as a
// restarted mongod keeps none of them.
//
// The state is one file, Dir/state.bson: BSON records ending with a record count and a
// CRC-32C, written to a temporary file, synced and renamed over the old one, so the file on
// disk is always one complete snapshot. It is written every Options.SnapshotInterval
// (default 5 s) while the state changes, and by Close after the last command finished:
// every write the server acknowledged before Close is in the final snapshot, and Close
// returns the error when it cannot be written. A process killed without Close loses at
// most the writes of the last interval; the next start moves the cluster time past the
// killed server's, so new events sort after any it handed out. Start refuses, naming the
// file and what is wrong with it, a state file that is truncated, fails its checksum, is
// not a minimongo state file or has another format version: it never starts empty over
// data it could not read. This is a development convenience, not a journal: there is no
// write-ahead log, and one Server at a time may use a Dir.
//
// # Not supported
//
// Authentication, TLS, compression, collations other than {locale: "simple"} (accepted
// wherever MongoDB takes a collation, since strings compare binary here; any other locale
// fails with BadValue naming the collation), text/geo/hashed/wildcard indexes,
// $where/$text/$jsonSchema and geo/bitwise query operators ($jsonSchema validators
// included), aggregation stages and expression operators not listed above, an update
// statement's constants (c), views, capped and
// time-series collections, renameCollection across databases, collMod options other than
// those above, fail points other than those above, explain, query plans (hints are checked for
// existence only; only _id and unique indexes speed up lookups), and durability of each
// write (see Persistence).
package minimongo
