// Package partition owns how events are spread over a topic's partitions and how a consumer
// group's partitions are spread over its members.
//
// The partition of a key is Jump(Hash(key), N): FNV-1a 64 of the key's UTF-8 bytes, then
// Lamping and Veach's jump consistent hash. Every jetbus client, in any language, computes the
// same partition for the same key; the vectors in hash_test.go pin it.
package partition
