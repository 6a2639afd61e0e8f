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
//   - ping, buildInfo, endSessions, refreshSessions, listDatabases (filter, nameOnly),
//     listCollections (filter, nameOnly), create (with changeStreamPreAndPostImages), drop,
//     dropDatabase, getMore, killCursors, count (query, skip, limit, hint).
//   - insert; update with many statements, upsert, multi, replacement documents and hint;
//     delete (limit 0 or 1); ordered and unordered execution with writeErrors carrying
//     their index; n, nModified and upserted as MongoDB reports them; _id generated as an
//     ObjectId and stored first.
//   - find: filter, sort, skip, limit (negative: single batch), projection (inclusion,
//     exclusion, dotted paths, aggregation field paths and $literal), batchSize,
//     singleBatch, hint, noCursorTimeout; cursors continued with getMore.
//   - findAndModify: query, sort, update (operators or replacement), remove, new, upsert,
//     fields. distinct (arrays unwound, values deduplicated by BSON equality).
//   - aggregate with $match, $sort, $skip, $limit, $project, $addFields/$set, $unset,
//     $replaceRoot/$replaceWith, $count, $group ($sum, $avg, $min, $max, $first, $last,
//     $push, $addToSet, $count; _id from field paths, documents of expressions or
//     constants), $unwind (string or document form), $sortByCount, $lookup (from,
//     localField, foreignField, as; not the let/pipeline form) and $changeStream.
//     Expressions are field paths, $$ROOT/$$CURRENT/$$REMOVE, literals, documents and
//     arrays of expressions, and the operators $literal $add $subtract $multiply $divide
//     $mod $concat $toUpper $toLower $eq $ne $gt $gte $lt $lte $cmp $and $or $not $cond
//     $ifNull $size $arrayElemAt $in $type; other expression operators fail with 168.
//   - createIndexes (key, name, unique, sparse, partialFilterExpression,
//     expireAfterSeconds), listIndexes, dropIndexes (by name, names, key pattern or "*").
//   - commitTransaction, abortTransaction.
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
// (descending) array element. Strings compare binary; collations are not supported.
// Partial index filters accept only the operators MongoDB allows there.
//
// # Updates
//
// $set $unset $inc $mul $min $max $setOnInsert $push ($each, $position, $slice, $sort)
// $pull (values, operator conditions, sub-queries) $pullAll $addToSet ($each) $pop $rename
// $currentDate (date or timestamp), applied in lexicographic path order as MongoDB 5+
// does; the positional operators $ (the first element of the array matched by the filter's
// conditions on that array) and $[] (every element); replacement documents; upserts seeded
// from the filter's equality conditions; the errors MongoDB reports for type mismatches
// (14), conflicting paths (40), _id changes (66), non-viable paths (28). Filtered
// positional operators ($[id]) with arrayFilters and pipeline updates are not supported.
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
// Options.TransactionLifetime are aborted.
//
// # Change streams
//
// On a collection, a database (aggregate: 1) and the deployment (aggregate: 1 on admin with
// allChangesForCluster). Events: insert, update (updateDescription with updatedFields,
// removedFields and truncatedArrays), replace, delete, drop, dropDatabase and invalidate,
// with documentKey, clusterTime, wallTime, and lsid/txnNumber for transaction writes,
// which appear at commit in order. fullDocument default, updateLookup, whenAvailable and
// required; fullDocumentBeforeChange whenAvailable and required (pre- and post-images are
// recorded for collections created with changeStreamPreAndPostImages). Resume tokens are
// {_data: "<hex>"} ordered by cluster time, reported as each event's _id and as
// postBatchResumeToken; resumeAfter, startAfter (also after an invalidate) and
// startAtOperationTime. $match, $project, $addFields, $set, $unset, $replaceRoot and
// $replaceWith may follow $changeStream. getMore waits up to maxTimeMS (default 1 s) and
// wakes as soon as an event is recorded. The oplog keeps Options.OplogSize events;
// resuming from a point no longer held fails with ChangeStreamHistoryLost (286).
//
// # Concurrency and lifetime
//
// One mutex guards all state, so any number of clients and cursors may run concurrently.
// Cursors idle for Options.CursorTimeout are killed. Close closes the listener and every
// connection, wakes every waiting operation and returns once all goroutines of the server
// have stopped.
//
// # Not supported
//
// Authentication, TLS, compression, collations, text/geo/hashed/wildcard indexes,
// filtered positional updates and arrayFilters, pipeline updates, $where/$text/
// $jsonSchema and geo/bitwise query operators, aggregation stages and expression operators
// not listed above, views, capped and time-series collections, validators,
// renameCollection, explain, snapshot reads outside transactions, showExpandedEvents in
// change streams, query plans (hints are checked for existence only; only _id and unique
// indexes speed up lookups), and persistence: all data lives in memory and is gone when
// the Server is closed.
package minimongo
