// Package ingress owns the way into jetbus for plain NATS clients: the "jetbus-ingress" NATS
// micro service that subscribes "in.>" in queue group "jetbus-ingress", checks what clients
// publish to "in.<topic>", publishes it through the Bus (validated by the schema registry's
// publish middleware, partitioned by key) and answers requests once JetStream stored the
// event; refused fire-and-forget messages go to the DLQ.
//
// It does not own the publish path (package jetstream: partitioning, the wire headers, the
// size check against the server), validation against schemas (package schema, through the
// Publisher's middleware), dead letters (package dlq), the NATS permissions that keep
// untrusted clients to "in.>" (the server's configuration: README, "Ingress"), nor the
// connection or the process around it (cmd/bridge).
//
// # Protocol
//
// A client publishes a JSON payload to "in.<topic>" with optional headers of the wire
// contract: Nats-Msg-Id (becomes the event ID, so a client's retries are stored once, end to
// end), x-key, x-ts (Unix ms), x-sid, x-caused-by and x-tags (comma-separated), and custom
// x-[a-z0-9-]+ headers (x-schema-version among them: validate against that live version), and
// the W3C trace context, traceparent, tracestate and baggage (docs/wire.md, "Trace context"):
// forwarded onto the stored event when valid (baggage only for the keys the bridge allows,
// tracing.baggage), dropped and counted when malformed, never a refusal. With a reply subject
// the answer is
//
//	{"id": "…", "topic": "…", "partition": 2, "seq": 1234, "duplicate": false}
//
// once JetStream acknowledged the event ("duplicate": JetStream already held that ID: nothing
// new was stored and seq is the stored event's), or
//
//	{"error": {"code": "schema", "message": "…", "details": {…}}}
//
// with the headers Nats-Service-Error ("<code>: <message>") and Nats-Service-Error-Code (an
// HTTP-like number, 400/403/413/422/503, since NATS service clients read a number there).
// The codes are Code's constants: bad_topic, not_allowed, not_json, too_large, schema,
// reserved_header, unavailable. Without a reply subject a refused message is dead-lettered
// (dlq.Queue.Reject, reason "ingress", the code first in x-dlq-error, group "ingress"); it is
// never dropped without a trace.
//
// # Choices
//
//   - Header problems are all reserved_header: a reserved prefix (x-dlq-, x-jetbus-), a custom
//     name that is not x-[a-z0-9-]+ (so X-Key is refused rather than silently not being the
//     key), NATS and JetStream directives (Nats-* other than Nats-Msg-Id: a client must not
//     steer the stream, e.g. with Nats-Expected-*), control characters, a bad x-ts, an empty
//     element of x-tags or x-caused-by, a key or Nats-Msg-Id over 1024 bytes (JetStream
//     keeps every ID of the duplicate window in memory), a header given twice. Headers
//     outside the contract (content-type, …) are not forwarded; the stored event's
//     content-type is always application/json.
//   - Tracing: with a tracer provider that records (WithTracerProvider; the bridge's tracing
//     section), each message gets a server span "ingress <topic>" ("ingress _other" for a
//     subject that is not an allowed topic), a child of the client's valid traceparent,
//     lasting until the message is settled; the Bus's "publish <topic>" span is its child,
//     so the stored event carries the client's trace ID, and a refusal's dead letter is
//     written under it. A refusal sets error.type to its code and the span's status to
//     error. Without tracing the client's trace context is forwarded as it came.
//   - A topic that is valid and allowed but has no stream is bad_topic (the Bus's
//     ErrTopicNotFound). Refusals of subjects that are not an allowed topic are counted under
//     topic "_other", so clients cannot create metric series at will.
//   - Replies go only to inboxes (Config.ReplyPrefixes, default "_INBOX"): a client picks the
//     reply subject, and ingress publishes with its own permissions, so replying anywhere
//     would let a client make ingress write into a stream or call the JetStream API. A request
//     with another reply subject is refused with not_allowed and dead-lettered.
//   - Throughput comes from pipelining: the subscription's one goroutine checks each message
//     and publishes it asynchronously, in arrival order; one goroutine waits for the
//     acknowledgements in the same order and answers from them. Config.MaxInFlight bounds the
//     messages held (awaiting an acknowledgement, a retry or a dead letter); at the bound
//     ingress stops taking messages (back-pressure), the subscription's pending buffer
//     (PendingMsgs, PendingBytes) fills, and beyond it NATS drops what arrives (a slow
//     consumer). Memory stays below the pending buffer plus MaxInFlight messages. The
//     metrics ingress_backpressure and ingress_dropped_total and a log line (at most every
//     10s) say when this happens.
//   - Shedding: NATS's buffer admits a message only where it fits, so clients sending large
//     messages faster than ingress checks them (checking costs time in proportion to size)
//     would keep it full and make NATS drop small messages with them. While the buffer holds
//     more than half of PendingBytes, ingress drops unchecked every message larger than 1/32
//     of the room left (with the defaults: none below 32 MiB buffered, those over 256 KiB at
//     56 MiB): a counter per message, so the buffer drains as fast as such a flood fills it,
//     and smaller messages are checked and stored. A shed request is answered unavailable; a
//     shed fire-and-forget message is counted (ingress_shed_total, Stats.Shed) and logged at
//     most every 10s, not dead-lettered (writing it would cost what shedding saves). Valid
//     large messages sent during such a flood are shed too. A flood of small messages is
//     not shed: it competes with valid ones for the buffer; bound such clients in the NATS
//     server (per-user limits).
//   - One breaker for all topics: the first publish that fails for a reason that is not the
//     client's (no stream responded, a lost connection, no acknowledgement within
//     AckTimeout, a stream that refuses to store) opens it; while it is open, requests are
//     answered unavailable at once, without trying, and fire-and-forget messages wait in the
//     retry queue (within MaxInFlight). A prober asks for the failing topic's stream with
//     backoff (50ms doubling to 2s); an answer, or any acknowledged publish, closes it.
//   - A request whose publish failed is answered unavailable, with details.id when the event
//     was sent (it may have been stored: retry with that Nats-Msg-Id and JetStream stores it
//     at most once within the topic's duplicate window). A fire-and-forget message whose
//     publish failed is published again, with the same event ID and time, until it is stored
//     or refused; only at the drain deadline is it given up, counted in
//     ingress_abandoned_total and logged as an error.
//   - Order: one replica publishes a connection's messages in the order NATS delivers them,
//     which is the order they were published, so per-key order holds for one publisher, and
//     with several replicas for a publisher that waits for each reply before sending the
//     next message of a key. A retried fire-and-forget message lands behind the ones that
//     followed it, and with several replicas consecutive messages go to different replicas:
//     fire-and-forget messages of one key may then be stored in another order.
//   - A message that would not fit the DLQ with the dead-letter headers (a body near the
//     server's max payload) is dead-lettered with its body cut to what fits, and the error
//     says so.
//   - The service speaks the NATS micro protocol ($SRV.PING, $SRV.INFO, $SRV.STATS, with the
//     micro package's types, so `nats micro` finds it) but is not micro.AddService: a verb
//     is answered only on a reply subject of Config.ReplyPrefixes, as requests to in.> are.
//     micro answers any reply subject, so `$SRV.PING` with the reply subject orders.p0 made
//     the bridge write into the orders stream. Refused verbs are counted
//     (ingress_verbs_refused_total) and logged at most every 10 s.
//   - The service needs a NATS connection of its own: Run waits, when stopping, until the
//     subscription handed over every message NATS had buffered, which it sees as the
//     connection's subscriptions going away, and it learns of the connection's end through
//     its closed handler. It also keeps a flood on in.> apart from the Bus's
//     acknowledgements.
//   - $SRV.STATS counts every message in num_requests, and in num_errors those refused
//     (whether answered or dead-lettered) or shed, as a micro service counts the requests it
//     answers with an error; last_error is the last one's "<status>:<code>" ("422:schema"),
//     never its message: any client may ask for STATS, and a refusal's message can quote
//     another client's subject, headers or payload. The endpoint's data carries Stats:
//     accepted, duplicates, refusals by code, in flight, dropped, abandoned.
//
// # Metrics
//
// ingress_accepted_total{topic}, ingress_duplicates_total{topic},
// ingress_rejected_total{topic,code}, ingress_publish_duration_ms{topic} (from taking a
// message to its acknowledgement), ingress_inflight, ingress_backpressure (1 while reading is
// paused), ingress_backpressure_total, ingress_backpressure_seconds_total,
// ingress_jetstream_unavailable (1 while the breaker is open), ingress_dropped_total (dropped
// by NATS before ingress took them), ingress_abandoned_total, ingress_verbs_refused_total and
// ingress_shed_total (messages dropped unchecked while the buffer filled, see Shedding),
// ingress_refusals_dropped_total (refused fire-and-forget messages not dead-lettered because
// the refusals' own max_in_flight places were all taken: refusals never hold a valid
// message's place).
package ingress
