// Package schema owns jetbus's schemas: JSON Schema compatibility checks as Confluent Schema
// Registry defines them, validation of payloads with compiled schemas, and (in later files)
// the registry in KV, upcasting, dual-write, schema files and the linter.
package schema
