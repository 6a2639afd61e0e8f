// Package schema owns jetbus's schemas: the registry of JSON Schema versions per topic in a
// JetStream KV bucket, compatibility checks as Confluent Schema Registry defines them for JSON
// Schema, validation of payloads, upcasting of old events to the latest version, dual-write to
// versioned topics, schema files for CI, and the linter of publish calls.
//
// # Registry
//
// Open a Registry on a JetStream context; every process that opens the same bucket shares it.
// Register adds a version after checking it against the previous live versions under the
// topic's compatibility mode (NONE, BACKWARD, FORWARD, FULL and their _TRANSITIVE variants;
// the lowercase names of the original design are accepted) and policy (STRICT, Confluent's
// rules, or LENIENT). Registering a schema identical to a live version returns that version.
// Get, Latest, List, Delete (soft), SetMode/Mode and Check (a dry run) complete it.
//
// Choices where the specification is silent:
//
//   - Bucket "jetbus_schemas" (DefaultBucket; WithBucket changes it), history 8. Keys:
//     "v.<topic>.<N>" holds version N of a topic as JSON (the schema, the mode it was
//     checked under, its declarative upcaster, a soft-delete flag, a SHA-256 fingerprint of
//     the canonical schema, the creation time); "c.<topic>" holds the topic's mode and policy.
//     Topics are dot-separated lowercase tokens, so the last token of a version key is always
//     the version, and "v.<topic>.*" lists exactly one topic's versions.
//   - A version is created with a KV create of its key: two concurrent registrations cannot
//     both become version N; the loser reads the registry again and is checked against the
//     winner. Soft deletion is a KV update with the revision read. Version numbers are never
//     reused.
//   - The mode of a new version is WithMode if given, else the topic's (SetMode), else the
//     registry's default (BACKWARD, as in Confluent). Deleted versions are not compared with.
//   - Every Registry watches the whole bucket and serves reads and middlewares from that view,
//     so a version registered in one process is enforced by another. Staleness bound: a
//     change reaches other processes when the watch delivers it, within milliseconds on a
//     healthy connection. Every resync interval (WithResyncInterval, default 1 s) the
//     Registry compares the bucket's last sequence with the last revision its watch
//     delivered and restarts a watch that stayed behind for two checks (its consumer was lost
//     in a server restart, say), so while its connection is up a process's view is at most
//     about two intervals (2 s) old. While disconnected it keeps the last view, and publishes
//     through the same connection fail anyway. A process sees its own registrations at once.
//   - Compiled schemas are cached per (topic, version) in that view, compiled on first use.
//     Remote $refs are refused: a schema must be self-contained. Draft 2020-12 applies unless
//     $schema names another; "format" is an annotation.
//
// # Publishing and consuming
//
// (*Registry).PublishMiddleware validates every event of a topic with a schema against the
// latest version and stamps x-schema-version; topics without a schema pass, unless the
// registry is strict (WithStrict), which refuses them with ErrNoSchema.
// (*Registry).DualWriteMiddleware also writes each event to "<topic>.v<N>".
// (*Registry).UpcastMiddleware brings consumed events to the latest version: Go upcasters
// (AddUpcaster, version n to n+1) take precedence over the declarative ones stored with
// version n+1 (rename, copy, remove, default, by JSON pointer); both run through the same
// chain. An event without x-schema-version on a topic with schemas is taken as version 1: it
// was written before the topic had a schema, or by a client that does not stamp versions.
// A missing hop is an error (ErrMissingUpcaster), never a silent pass; an event that still
// fails validation after upcasting is a dead letter (jetbus.Permanent).
//
// # Files and linting
//
// Schema files live in <dir>/<topic>/v<N>.json with an optional v<N>.meta.json sidecar
// carrying the version's compatibility mode, policy and declarative upcaster. CheckDir checks them
// offline, PushDir registers them idempotently; `bridge schema check|push` wrap them for CI.
// Lint (and `bridge lint`) finds publish calls in Go, JavaScript/TypeScript and Python and
// reports invalid topics, topics without a schema and bad custom header names, with the
// naming rules of package jetbus.
//
// # What it does not do
//
// It does not check compatibility of $dynamicRef, unevaluatedProperties/Items or
// if/then/else beyond equality (any change there is reported), nor detect overlapping oneOf
// alternatives (oneOf is compared as anyOf, as in Confluent). It does not resolve schemas
// across topics or URLs, does not downcast (a consumer always sees the latest version), and
// does not delete versions for good. The registry is not an HTTP service: processes share it
// through NATS.
package schema
