// Package jetstream implements the jetbus Bus on NATS JetStream.
//
// It owns the wire contract of docs/wire.md: one stream per topic (named by replacing "." with
// "_") with subjects "<topic>.p0" … "<topic>.p<N-1>" and the partition count in the stream's
// Metadata ("jetbus.partitions"); messages whose body is the JSON payload and whose headers
// carry the event fields (Nats-Msg-Id, x-key, x-ts, x-sid, x-caused-by, x-tags); one durable
// pull consumer per (group, partition) named "<group>_p<n>". It does not own how partitions
// are spread over group members (package partition), schemas (package schema) or dead letters
// (package dlq): those plug in through the jetbus.PartitionSubscriber capability, publish
// middlewares and handler middlewares.
//
// # Choices
//
//   - Stream subjects are listed one per partition rather than as a wildcard, so a publish to
//     a partition that does not exist fails instead of being stored where no consumer reads.
//   - A keyed topic (TopicConfig.Keyed) stores each event under "<topic>.p<n>.<key token>"
//     (jetbus.KeyToken) with MaxMsgsPerSubject = KeepPerKey, so JetStream compacts per key and
//     the jetbus.KeyReader reads (Latest, At, Versions, Fold) are answered by Direct Get
//     (orbit.go's jetstreamext batches them) or a scan of one subject. Consumers filter
//     "<topic>.p<n>.>"; everything else is as on a plain topic. At counts a message stored at
//     exactly t (the server's up_to_time does not: the Bus asks for t plus a nanosecond).
//   - Partitions can grow (EnsureTopic with a larger count) but not shrink. Growing moves
//     keys to other partitions (jump hash moves about 1/(N+1) of them per step): per-key order
//     holds only from then on.
//   - Every consumer is created with DeliverPolicy All and then reset to the sequence its
//     starting Position resolves to, so SetCursor can later move it anywhere, including back to
//     the start. Consumers have MaxDeliver = MaxAttempts, AckWait = AckTimeout and
//     MaxAckPending = MaxInFlight; a re-subscription updates these settings and keeps the
//     position.
//   - Every consumer of an ordered group (the default) uses the "pinned_client" priority
//     policy with the priority group "jetbus": one client consumes a partition at a time, even
//     when several processes subscribe the same group without package partition. A stopped
//     subscription unpins at once; a crashed one loses the pin after the pin TTL
//     (WithPinnedTTL, default 10s).
//   - An unordered group's consumers (jetbus.Unordered) have no priority policy and the
//     Metadata jetbus.unordered=true; every subscriber pulls every partition. A group keeps
//     its kind: Subscribe refuses the other kind (jetbus.ErrInvalidOption), SetCursor creates
//     missing partitions in the group's kind, SubscribePartition refuses Unordered. Its
//     partitions are pulled by the Bus's own pull requests (unordered.go) instead of nats.go's
//     Messages iterator, so that a stopping subscriber receives what its requests still have
//     coming before it unsubscribes and gives it back (a nak, after the unsubscribe: else the
//     server could send it straight back; an event on its last attempt is handled instead),
//     and for speed: a delivery costs one allocation, and the acks of events handled in a
//     burst are sent together, within a millisecond. There is no gap check and no reset:
//     deliveries lost in flight come back after AckTimeout; a window that shrinks restarts
//     the buffered deliveries' ack timeout (InProgress).
//   - A handler error is retried with NakWithDelay(Backoff(attempt)); a Permanent error
//     terminates the message (TermWithReason) after the middlewares ran; a non-permanent error
//     on the last attempt is nak'ed, the server stops delivering it (MaxDeliver) and publishes
//     its MAX_DELIVERIES advisory, from which the dead-letter safety net recovers it. Events
//     are processed one at a time per partition, in stream order (with KeyConcurrency, that
//     many keys at once; unordered, that many events at once, retried through the server).
//   - Pulls are sized to the handler (the pull window): the first asks for BatchSize events;
//     after each window's worth the window is resized, by factors of two, to what the
//     handler's measured speed handles within a quarter of AckTimeout, between 1 and
//     MaxInFlight. A fast handler gets MaxInFlight (the server's limit anyway), so the pipeline
//     never waits for a pull; a handler that slows down shrinks the window before the events
//     it buffered outlive their ack timeout. Growing drains the pull first (nothing is lost);
//     shrinking stops it and returns the buffered events to the consumer, in order.
//   - A pull that goes 0.25 to 0.5 s without a delivery has its waiting Next woken (wake.go),
//     again after 0.5 and 1 s more of quiet: nats.go's iterator can skip sending its next
//     pull request and then waits two heartbeats (10 s) before the partition pulls again;
//     woken, it sends the request. The price: a timer per partition checking four times a
//     second while deliveries come, three wakes per idle spell and nothing after, one Next
//     call more after a handler slower than a tick, per delivery an atomic add, an atomic
//     load and a context case in Next's select, and a pull request that met no one given up
//     about 12 s after the last delivery instead of 10 s (each call into Next restarts
//     nats.go's heartbeat count).
//   - Partition counts are cached per topic for WithTopicCacheTTL (default 10s).
//   - Stop returns fetched but unhandled messages (and ManualAck deliveries not settled yet)
//     by resetting the partition's consumer to its ack floor once this client's acks are
//     settled, not with naks: a nak that reached the server after the next owner received the
//     same event would send it back again, out of order. They are delivered next, in order,
//     with their Attempt unchanged.
//   - Deliveries lost on the way to this client (a reconnect, a consumer leader change, a
//     pull request of this client the server still fills after the client stopped reading
//     it) show as a gap in the consumer sequence: every delivery of a pinned consumer goes to
//     one client, so any sequence but the last one plus one is a gap, including the first
//     delivery after a reset (the sequence starts again at 1) and a sequence that went
//     backwards (a reset or a leader change behind the client's back). The pull ends there
//     and the lost deliveries are returned by the same reset before anything later is
//     handled, so per-partition order holds across server restarts; when the reset cannot
//     be made yet (the server unreachable), the gap is kept and the recovery retried. With
//     ManualAck the reset waits for the application to settle what it holds (it would
//     otherwise be delivered twice): while it holds deliveries past AckTimeout, the gap is
//     kept too, so nothing later is handed over before the lost deliveries (the server alone
//     would send them again only after their ack timeout, behind later events).
//
// # Tracing
//
// Every event carries its W3C trace context in the traceparent and tracestate headers
// (docs/wire.md, "Trace context"), exposed as Event.TraceParent and TraceState; a malformed
// one is dropped and counted (events_trace_headers_dropped_total{topic,header}), at publish
// and at delivery, never an error. W3C baggage travels only for the keys WithBaggageKeys
// allows.
//
// With WithTracerProvider (or a global provider set before Open) the Bus traces with
// OpenTelemetry, following its messaging semantic conventions (messaging.system "nats"):
//
//   - "publish <topic>", a producer span per Publish and PublishAsync: the child of ctx's
//     span, or else of jetbus.WithTraceContext's traceparent, or a root. It covers the
//     publish middlewares and the wait for the server (for PublishAsync, until the Wait
//     that learns the result); the event carries this span's context. Attributes:
//     messaging.operation.name publish, messaging.operation.type send,
//     messaging.destination.name (the topic), messaging.message.id (the event ID),
//     messaging.destination.partition.id.
//   - "process <topic>", a consumer span per delivery: the child of the event's trace
//     context (a producer span, or what a foreign client sent), covering the handler chain
//     and the settlement. The handler's ctx carries it, and the event's baggage. Attributes:
//     messaging.operation.name and .type process, messaging.destination.name,
//     messaging.consumer.group.name, messaging.destination.partition.id,
//     messaging.message.id, jetbus.attempt (the delivery's attempt, from 1); and, unless the
//     delivery was acknowledged at its first attempt, jetbus.outcome (ack, retry,
//     terminate, last-attempt, manual) with the last attempt. A handler error is recorded
//     with the error status. Each redelivery is a span of its own with its attempt, a
//     sibling of the first; with KeyConcurrency a retry in place is a "retry" event of the
//     one span.
//
// The SDK spends about 200 ns per attribute of a span (BENCHMARKS.md, "Tracing"), so a span
// gets no more than these: it starts with those the conventions name for sampling decisions
// (system, operation, destination), gets the others in one call only when it is sampled, and
// an acknowledged delivery's span is not touched after that.
//
// Without a tracer that records (the default) the Bus starts no span and adds nothing to a
// handler's ctx; Publish still writes ctx's span context when ctx holds one, and otherwise
// WithTraceContext's, so a trace continues through a service that does not trace itself.
//
// # One delivery's path
//
// Each partition of a subscription has one partConsumer and one goroutine; a delivery of an
// ordered group goes through these functions, from fetch to ack, nak or term (an unordered
// group's partition is pulled by pullUnordered, unordered.go, instead of steps 1, 2 and 6,
// and then meets 3 to 5 alike):
//
//  1. pull.go, partConsumer.run: looks the consumer up (reclaimPin, pin.go, when the handle
//     was lost while this client held the pin), takes the partition over for
//     SubscribePartition (takeOver, pin.go), opens a pull (Consumer.Messages, sized by the
//     pull window, priority group jetbus) and hands it to consume.
//  2. pull.go, partConsumer.consume: it.Next fetches the message; the pin the server gave this
//     client is read from its Nats-Pin-Id header; fence: a consumer sequence other than the
//     last one plus one (checkSequence; the first delivery is checked against the baseline:
//     the consumer's delivered sequence when the partition started with nothing pending
//     (baseline) or after a take-over without a reset, 0 after any reset) ends the pull
//     (errDeliveryGap) before the message is handled, and run calls recoverDeliveries
//     (pin.go) to have the lost deliveries sent again, first and in order;
//     fence: a message fetched after Stop (not Drain) is not started but left pending for
//     release. A Next that waits 0.25 to 0.5 s without a delivery is woken and called again,
//     up to three times in a quiet spell (wake.go: nats.go's iterator can wait for a pull
//     request it never sent).
//  3. keyworkers.go, keyWorkers.dispatch (KeyConcurrency > 1 only): sends it to the worker of
//     its key (KeyHash modulo the workers), which checks the same stop fence before handling;
//     otherwise consume calls handle itself, one message at a time.
//  4. settle.go, partConsumer.handle: decodeDelivery (codec.go); a message the Filter refuses
//     is acked there; a ManualAck delivery is registered as pending (ack.go, addPending);
//     call runs the handler chain (a panic becomes an error; with KeyConcurrency a failure is
//     retried in place, holdFor keeping its ack deadline alive); the pull window observes the
//     time taken.
//  5. settle.go, partConsumer.settle: Ack on success; TermWithReason on a jetbus.Permanent
//     error; NakWithDelay(Backoff(attempt)) before the last attempt; Nak on the last one (the
//     server's MaxDeliver then stops it, and the dead-letter safety net takes its advisory).
//     A ManualAck delivery the handler accepted is not settled here: ack.go's Bus.Ack
//     (DoubleAck), Bus.Nack, Bus.AckBatch (acks, then one flush) settle it later, and
//     Bus.InProgress extends it; takePending lets exactly one of handle (on an error) and the
//     application settle it.
//  6. pin.go, partConsumer.release (on stop): what is still unacknowledged (fetched but not
//     started, a retry waiting for its backoff, a held ManualAck delivery) is returned by a
//     reset of the consumer to its ack floor, after settledInfo has seen this client's own
//     acks processed; then the pin is released. Held deliveries are nak'ed (nakAll) only
//     when the reset cannot be made.
//
// The fences, in the order a delivery meets them: the lease (package partition: a member
// subscribes to a partition only while it holds its lease); the pin (the consumer delivers
// to one client at a time, and every reset, in recoverDeliveries and release, is made only
// after pinnedBy confirms this client still holds it); the consumer sequence (a gap ends the
// pull, consume); the stop check (consume and the key workers); takePending (one settlement
// per ManualAck delivery).
//
// # Cost per delivery
//
// What the Bus itself does per delivery, without the server (BenchmarkDeliveryPath,
// `go test -bench DeliveryPath -benchmem ./jetstream/`, on the 2-vCPU machine of
// BENCHMARKS.md): 0.5 to 1 µs (460 ns when first measured, 500–800 ns in later runs with
// the machine shared, the metadata included) and one allocation of 512 bytes (the
// Delivery, its Event and the message's metadata together) for an event without custom
// headers, tags or caused-by: reading the metadata from the ack subject in one pass
// (nats.go's Metadata would add an allocation), reading the mapped headers by name,
// checking the body is JSON (gjson's validator, three times faster than encoding/json's and
// fuzzed against it), the handler chain, two clock reads (the handler's start and end, which
// the pull window reuses), and the ack. TestDeliveryAllocations fails if a change adds an
// allocation. For comparison, nats.go spends about 2 µs per message receiving it, and a
// pinned consumer costs the server about 4 µs per message more than a plain one (it
// re-encodes the headers to add the pin); a raw client of the same consumer reading the same
// events still does less, and how much less is measured in bench/peers (BENCHMARKS.md).
// An unordered group's delivery costs the same one allocation (the pulled message, which
// holds its metadata, Delivery and Event: TestUnorderedDeliveryAllocations) and saves what
// nats.go's Messages iterator spends per message (a timer, the message wrapper); its
// consumer is not pinned, which is most of why it is faster.
package jetstream
