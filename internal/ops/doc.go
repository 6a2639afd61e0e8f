// Package ops is what operators see of a jetbus process: the operations endpoints (/healthz,
// /readyz, /metrics, /v1/ops/status), the status report behind /v1/ops/status and `bridge
// status` (topics; groups with members, owners, leases and lag per partition; dead letters by
// topic and reason; components), its table form, and the metrics registry.
//
// It reads; it changes nothing on the server. The status of a group comes from the same
// places the rest of jetbus writes it: partition.Status (members, assignment, leases in KV)
// and the Bus's Cursor (the partition consumers' ack floor and pending counts). Groups are
// found from the topic streams' consumers (their jetbus.group metadata) and from the
// configuration, so a group shows up before its first member joins.
//
// It does not run components or handle signals (package process).
package ops
