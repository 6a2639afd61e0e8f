// Package jetbus is the contract of the jetbus event bus: the Event, the Bus interface,
// handlers and deliveries, publish and subscribe options, middleware types and errors.
//
// It holds no logic beyond option handling and validation of names; the other packages of the
// module own the rest.
//
// # Packages
//
// Libraries, for applications and for the processes:
//
//	jetbus                     the contract: Event, Bus, handlers, deliveries, options, middleware types, errors, names
//	jetstream                  the Bus on NATS JetStream: streams, consumers, publish, pull, settle, the wire contract (docs/wire.md)
//	partition                  consumer groups: membership, the assignment of partitions, partition leases, the partitioned Subscriber
//	schema                     the schema registry in KV, compatibility, validation, upcasting, schema files, the publish-call linter
//	dlq                        dead letters: the handler middleware, the safety net, per-key parking, inspect, replay, discard
//	ingress                    the way in for plain NATS clients: the jetbus-ingress service on in.>
//	changefeed                 MongoDB into topics: change-stream feeds, copies and outbox drainers, under a lease
//	projection                 topics into MongoDB: changelog and transactional projections, rebuilds
//	snapshotapi                the HTTP API of the views: documents, pages, history, read-your-writes, OpenAPI
//
// Test support and examples:
//
//	bustest                    the conformance suite of the jetbus.Bus contract
//	embeddedtest               the real servers tests and dev mode run against: embedded nats-server, the MongoDB test backend
//	embeddedtest/minimongo     an in-process server speaking the MongoDB wire protocol, for tests only
//	embeddedtest/minimongo/mongotest  a conformance suite of MongoDB deployments as jetbus's tests use them
//	embeddedtest/minimongo/spectest  MongoDB's unified specification tests run against the test backend (make spec-mongo)
//	examples/counter           a transactional projection run as a program of its own
//	e2e                        end-to-end tests: the binaries as OS processes on a NATS cluster, under failures
//
// Commands:
//
//	cmd/bridge                 the bridge process (ingress, changefeeds, outbox drainers, the DLQ sweeper) and the operator's tools
//	cmd/projector              the projector process (projections as partitioned replicas, the snapshot API) and rebuild
//	cmd/jetbus-dev             make dev's entry point: the whole pipeline on one machine from one config file
//	cmd/cmdtest                tests of the bridge and projector binaries as an operator runs them
//
// Internal packages the libraries may import (shared rules, nothing process-level; see
// TestLibrariesImportOnlyLibraryInternals):
//
//	internal/retry             which failures are worth another try, and the backoff between tries
//	internal/streamscan        one in-order read of a stream, for lookups by content (jetstream, dlq)
//	internal/jsonenc           the JSON encoding pieces the allocation-free renderers share (changefeed, snapshotapi)
//	internal/promreg           registering Prometheus collectors: register or reuse, register or replace
//	internal/mongoname         MongoDB's rules for database, collection and field-path names
//	internal/option            the options every component takes (logger, registerer) and the loop applying them
//	internal/spans             OpenTelemetry through its API: whether a provider traces, an event's trace context as a parent, messaging attributes
//	internal/streamcfg         whether a stream or bucket already holds the configuration asked for: update only a change (jetstream, dlq)
//
// Internal packages of the processes (they import the libraries, never the other way round):
//
//	internal/config            the processes' configuration: YAML, environment and flags, decoded and checked
//	internal/wiring            the composition root: a loaded configuration becomes each process's components, and the tools' connections
//	internal/tracing           the OpenTelemetry SDK of the processes: the tracing section and OTEL_* variables, the OTLP exporter, flushed on stop
//	internal/tracing/otlptest  an in-process OTLP receiver (HTTP and gRPC) for tests of what the processes export
//	internal/process           what the processes share around their components: Runner, signals, connections, Run
//	internal/ops               what operators see: /healthz, /readyz, /metrics, /v1/ops/status, the status report, the registry
//	internal/ops/opstest       a consumer group in a known, stable state for the tests of what operators see
//	internal/cli               the command line both binaries share: exit statuses, flags, shared commands, the reference
//	internal/devenv            the local environment of make dev and --dev: embedded NATS and MongoDB backend on a directory
//	internal/devmode           the binaries' --dev flag: the embedded servers in the process, where the config says
//
// # Semantics
//
// Publish writes one event to a topic. The event's ID is a UUIDv7 unless WithID sets one;
// JetStream drops a second publish of the same ID within the topic's duplicate window, so a
// retried publish is harmless. Events with the same key land in the same partition and keep
// their order.
//
// Subscribe consumes a topic as a durable group: every event is delivered to one member of the
// group, and the group's position (its cursor) survives restarts. The handler's result decides
// what happens to the event:
//
//   - nil: the event is acknowledged (unless ManualAck is set: then Bus.Ack or Bus.Nack does).
//   - an error: the event is delivered again after the Backoff delay, up to MaxAttempts
//     deliveries in all.
//   - Permanent(err), or an error on the last attempt: the event is handed to the dead-letter
//     step (the DLQ middleware of package dlq, when installed) and then terminated. It is never
//     silently dropped: it stays in the topic's stream, and JetStream publishes an advisory for
//     every terminated message.
//
// Every event carries its W3C trace context (Event.TraceParent, TraceState; docs/wire.md,
// "Trace context"): Publish takes it from ctx's span (or WithTraceContext), and a Bus that
// traces (package jetstream, WithTracerProvider) starts a producer span per publish and a
// consumer span per delivery, which the handler's ctx carries.
//
// Order holds per key within a partition as long as handlers succeed. A failed event is
// redelivered after its backoff, behind the events that followed it; handlers that need strict
// per-key order across retries use the per-key mode of package partition.
package jetbus
