// Package snapshotapi serves materialized views over HTTP: one document by key, filtered and
// ordered pages, a key's state at a past time, read-your-writes, and an OpenAPI 3.1 document
// of it all. It is an http.Handler (on echo v4) that the projector process mounts beside its
// operations endpoints and that a service of yours can mount in its own server.
//
// It owns the HTTP side only: routes, the query grammar, entity tags and conditional
// requests, cursors, access control, CORS, compression, limits, the error shape and its
// metrics. It reads what docs/views.md says projections write — view documents, their
// <collection>_history, jetbus_checkpoints and jetbus_projections — and writes nothing to
// MongoDB. It does not run projections (package projection), register schemas (package
// schema) or serve the operations endpoints (internal/ops).
//
// # Routes
//
//	GET|HEAD /v1/views/{view}/{key}   one document (?meta=1 adds _v and _ts; ?at=T its state at T)
//	GET|HEAD /v1/views/{view}         a page: ?<field>=<op>.<value>… &order=<field>.<asc|desc> &limit=N &cursor=…
//	GET /v1/views/{view}?watch=true   the list watched, as Server-Sent Events: ?<field>=<op>.<value>… &since=<position>
//	GET|HEAD /v1/topics/{topic}/keys/{key}   the key's last event in a keyed topic's stream (?at=T: its last at or before T)
//	GET|HEAD /openapi.json            the OpenAPI 3.1 document (public)
//
// Every view read takes ?after=<partition>:<seq>[,…] and ?wait=<duration>.
//
// Errors are one shape, {"error":{"code","message","details"}}, with the codes of
// errors.go; bad input is a 4xx, never a 500. A 500 means a fault of this server (a query
// MongoDB refused, a panic), logged; MongoDB unavailable or slow is 503 with Retry-After.
//
// # Choices
//
//   - Entity tags are strong and derived, not hashed: "<_v>-<view tag>" for a key, where the
//     view tag stands for the view's name and fields, ?meta and the rendering version, so a
//     configuration change changes every tag; a gzip body has its own tag ("-gz"), being
//     another representation (RFC 9110 8.8.3.3). A page's tag hashes its (_id, _v) pairs and
//     next cursor. Last-Modified is the served version's _ts (the event time), so
//     If-Modified-Since is only as good as event times are monotonic per key; entity tags
//     are exact, and If-Modified-Since is evaluated only without If-None-Match (RFC 9110).
//     Preconditions are evaluated in RFC 9110 13.2.2's order (If-Match, If-Unmodified-Since,
//     If-None-Match, If-Modified-Since) and ignored when the key does not exist (404). A
//     malformed entity-tag list is a 400; a malformed date is ignored, as the RFC says.
//   - The query grammar is PostgREST's, closed: a parameter is reserved (order, limit, cursor,
//     after, wait, meta, at) or the exact name of a declared filter field; values are parsed
//     to the field's type (string, number, bool, time) before any filter is built, and
//     filters hold only declared names, eq ne gt gte lt lte in (as $in) and prefix (an
//     anchored, escaped $regex). Repeating a field ANDs its conditions (total=gt.10&total=lt.20).
//     A limit over the view's max_limit is a 400, not silently cut. Query strings are at most
//     Config.MaxQueryBytes.
//   - time filters: JSON has no date, so a payload's time is a string in the view. A time
//     value (RFC 3339 or Unix ms) matches a BSON date field by its instant and a string field
//     by string comparison with the value as written (Unix ms as JavaScript's
//     2006-01-02T15:04:05.000Z form), which orders correctly when producers write one format
//     (UTC, fixed precision).
//   - Pages are keyset-paged on (order field, _id): the cursor is the last document's order
//     value (its BSON type and bytes) and _id, bound to the query (view, filters, order) and
//     sealed with AES-256-GCM, so that it can be neither altered nor read (the order field may
//     be one the view's fields hide). A page holds at most limit documents and
//     Config.MaxPageBytes of them (at least one): past that budget it ends early, with its
//     next link. A cursor survives writes: a document that exists
//     throughout a walk, and whose order field does not change, is returned exactly once.
//     Values of different BSON types follow MongoDB's sort brackets; order fields should hold
//     scalars (MongoDB sorts arrays by their least or greatest element, which keysets do not
//     follow). The cursor key must be the same on every replica: LoadCursorKey keeps one in
//     the NATS KV bucket jetbus_snapshotapi, created once by whichever replica comes first, so
//     nobody has to configure a secret. A cursor from another key, query or version of the
//     API is a 400 bad_cursor: start the walk again.
//   - Read-your-writes waits until the checkpoint of each position's partition reaches the
//     position or the wait (default 2 s, at most 10 s, and never past the request timeout)
//     runs out: then 503 not_applied, Retry-After: 1 and details saying how far behind the
//     view is. While Run's change stream on the view's database runs, a waiting request
//     reads the checkpoint again only when the stream reports a write to it (and at least
//     once a second); without it, it polls (2 ms doubling to 50 ms). At most
//     Config.MaxWaits requests wait at once (503 unavailable beyond). The read that follows
//     goes to MongoDB, not to the cache.
//   - Positions: a list answers with the position it reflects (Jetbus-Position), a watch
//     names each message by one (its id). A position is a cluster time of the view's live
//     collection and how many of its changes at that time it covers, sealed like a cursor
//     (position.go): valid on every replica, since all read one oplog. The list's is the
//     operationTime of the majority read that resolved the live collection just before
//     the page was read, so the page reflects at least every change up to it.
//   - Watches (watch.go): a snapshot read (readConcern snapshot, one cluster time), synced,
//     then the changes of a change stream on the live collection (fullDocument:
//     updateLookup) started right after (startAtOperationTime). Each message carries the
//     version its change wrote and no other (changes.go), so resuming at its id misses
//     nothing and repeats nothing; a position the oplog no longer holds is a 410
//     position_expired. One stream per collection per process (a hub, hub.go) serves every
//     watch, keeping its changes of the last Config.WatchWindow (and at least its last
//     4,096) within Config.WatchWindowBytes; each watch has a buffer of Config.WatchBuffer
//     keys that coalesces a slow client's changes (a key's latest replaces its waiting
//     one) and is disconnected with an overflow event once, its buffer full, it falls
//     behind what the hub keeps. A watch that fell behind with room in its buffer (its
//     drainer held up, not its client) is not cut off: like a watch resumed from an older
//     position it reads a change stream of its own until it meets the hub's. At most
//     Config.MaxCatchUps watches do so at once; the others are answered 200 and wait their
//     turn in order, streaming keep-alive comments (catchup.go says why not a 503). Filters
//     are applied to changed documents in memory, as MongoDB applies them (match.go).
//     Config.MaxWatchers bound the watches; each write has Config.RequestTimeout to
//     complete. After a
//     rebuild's switch a watch moves to the new generation by comparing both at one
//     cluster time (switch.go), without a gap and without going back on a key.
//   - The live collection of a view comes from jetbus_projections (after a rebuild), cached
//     for at most a second, one query at a time per view.
//   - A document cache (Config.CacheBytes, LRU) answers repeated and conditional reads by
//     key without MongoDB, which is what lets a client get 304s at about 0.9 times the rate
//     of echo returning a constant (BENCHMARKS.md). It is kept by a change stream on each
//     views' database (Run): a change to a document drops
//     its entry, a read installs an entry only if no change of its document was seen since
//     the read began, and the cache answers only while the stream runs and has caught up
//     within a second. Without Run, or on a deployment without change streams, every read
//     goes to MongoDB.
//   - ?at=T reads <live collection>_history: the record of the key with the greatest
//     (_ts, _v) such that _ts <= T (times are cut to milliseconds, as BSON dates are). No
//     record, or one whose doc is null, is a 404; a view whose projection keeps no history
//     is a 422 no_history, a time older than its retention a 422 history_expired.
//   - /v1/topics/{topic}/keys/{key} reads the stream through jetbus.KeyReader (Deps.Keys,
//     the Bus): Latest without at=, At with it — the last event the stream stored at or
//     before T, by the stream's store time (nanoseconds), not the event's ts, because that is
//     what JetStream can answer directly. It serves only the topics of Config.Topics, so a
//     client cannot read every stream of the account; an undeclared topic, or one without a
//     stream, is a 404 unknown_topic, a plain topic a 422 not_keyed (the stream keeps no
//     per-key state; folding a partition per request would let one client scan it). The
//     body is {topic, key, id, partition, seq, ts, payload}; the ETag is "<seq>-t1" (the
//     stream sequence is the version), Last-Modified the event's ts; a tombstone is a 404
//     with its seq in details, and an event body that is not JSON (a foreign client's) a 422
//     not_json. A token reads a topic with the scope entry "topic:<name>" (TopicScope) or
//     "*". Topic reads do not take after= (there is no projection to wait for: the stream is
//     the state).
//   - Auth: with no tokens and no JWT settings the API is open. A bearer token is a static
//     token (compared by SHA-256 in constant time) or a JWT (HS256 or RS256; exp required,
//     nbf, iat, iss and aud checked, 30 s leeway) whose scope claim lists the views. No,
//     invalid or expired token: 401 with an RFC 6750 challenge; a view outside the scope:
//     403. /openapi.json is public.
//   - Limits: header fields (Config.MaxHeaderBytes: 431), bodies (Config.MaxBodyBytes: 413;
//     no route reads one), query strings (400), and Config.RequestTimeout per request (503
//     timeout). Errors carry Cache-Control: no-store.
//   - Documents render from BSON straight to JSON in stored order, without _v and _ts (unless
//     ?meta=1), _topic and _deleted; kept tombstones (_deleted: true) are 404s and are left out
//     of pages. Dates become RFC 3339 strings with milliseconds, ObjectIds hex, NaN null.
//
// # Tracing
//
// With a tracer provider that records (WithTracerProvider), each request is a server span
// "<method> <route>" continuing the request's traceparent, an ?after= wait its child span
// "await <view>", and the answer carries a W3C traceresponse header
// (00-<trace-id>-<span-id>-<flags>) naming the request's span (exposed to browsers with
// CORS). See trace.go.
//
// # Metrics
//
// snapshotapi_requests_total{route,view,code}, snapshotapi_request_duration_seconds{route},
// snapshotapi_conditional_requests_total{route,result} (not_modified, modified, failed: the
// 304 ratio) and snapshotapi_cache_lookups_total{result}.
package snapshotapi
