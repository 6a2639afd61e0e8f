// Package wiring is the composition root of jetbus's processes: the one place where a loaded
// configuration (package config) becomes running components. Bridge and Projector return
// what process.Run runs; Open connects the one-shot tools (`bridge status`, `bridge dlq …`,
// `bridge schema push`, `projector rebuild`) and closes what it opened.
//
// Each configuration fact is turned into behaviour here once: the mapping of every YAML
// section to its package's Config (config.go; "a database defaults to mongo.database" is
// the function database), the topics and groups a status lists, and what each process
// shares. A process opens its shared things once — one NATS connection set, one schema
// registry, one DLQ queue, its Buses sized in one place — and closes them one way
// (resources): last opened first, at once when setup fails (it is retried), after every
// component stopped otherwise.
//
// Defaults live in the packages (their Default* constants and withDefaults); the config
// layer states the same values as YAML defaults for the reference, and a test here proves
// that both agree.
//
// Component names follow one scheme, kind/name, in logs, /v1/ops/status and metrics:
// dlq/sweeper, ingress/in, changefeed/<name>, outbox/<name>, projection/<name>,
// snapshotapi/http.
//
// The commands (cmd/bridge, cmd/projector) hold cobra commands and nothing else; the
// generic runner, signals and connections are package process's.
package wiring
