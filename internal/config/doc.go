// Package config is the configuration of the bridge and projector processes: one YAML file,
// environment variables JETBUS_<SECTION>_<KEY> and command-line flags on top (merged with
// koanf), decoded into Config and checked before anything starts.
//
// Every key is declared once, as a struct field in config.go with tags for its YAML key,
// description, default, example, allowed values, bounds and named check. Decoding, defaults,
// unknown-key detection, the environment variable names and the reference docs/config.md
// (Reference) are all derived from those declarations, so they cannot disagree.
//
// Load reports every problem at once as Errors: unknown keys (with the nearest declared
// one), wrong types, bad values, duplicate names and references to undeclared topics,
// projections and views, each with the file, line and column and the key path, or with the
// environment variable or flag that set the value. The file is decoded with
// go.yaml.in/yaml/v3 into yaml.Node to keep those positions (koanf's own YAML parser returns
// plain maps).
//
// It does not connect to anything, and it does not map sections to the components' own
// Configs: the components' packages own those, and the process wiring maps them.
package config
