// Package e2e tests jetbus as users run it: the real bridge and projector binaries, and a
// transactional projection as a program of its own (examples/counter), as OS processes, from a
// generated configuration, on a 3-node NATS cluster and the MongoDB test
// backend, fed by a foreign client (Node.js, the nats npm package, through ingress) and a Go
// client (the Bus), read by HTTP clients — while processes are killed, a NATS node restarts
// and MongoDB fails. It holds tests only.
//
// It owns the harness (the stack of servers and processes, the clients, the fault switches)
// and the invariants checked after every scenario. It does not own any guarantee it checks:
// those belong to the packages (partition, projection, ingress, changefeed, dlq), which prove
// them one by one; here they are checked together, through the processes.
//
// # Running
//
//	make e2e-node    installs the Node client (e2e/nodeclient, npm ci from the lockfile)
//	make e2e         every scenario (build tag e2e), with the load figures of BENCHMARKS.md
//	go test ./e2e/   the smoke: one projector SIGKILL and one NATS node restart, and the
//	                 short run of the tracing scenario (TestTraceSmoke)
//
// # Choices
//
//   - NATS is three in-test embedded servers on loopback (embeddedtest.Cluster): a node is
//     stopped and restarted with its store, port and routes, which is what a node restart is,
//     and the test needs no nats-server binary.
//   - The nodes require the NATS users deploy/ ships (deploy/nats/auth.conf): every process
//     and client logs in as the user it would be deployed as (bridge, projector — the
//     counters too —, client for ingress, producer for the Go Bus, admin for the test's own
//     reads and faults), and a scenario fails on any permission violation the servers log.
//   - MongoDB is the in-test backend (minimongo) with a data directory, so "MongoDB down" is
//     the backend stopped and started again on the same port with its data, as a mongod
//     restart is. Failing writes are MongoDB's failCommand fail point.
//   - Every published event has a client-chosen ID (Nats-Msg-Id, or the Bus's WithID), and a
//     client retries an unanswered or "unavailable" publish with the same ID, as the ingress
//     protocol asks: so "exactly once in the topic" is checkable by ID.
//   - Payloads carry the key and a counter; the views are changelog projections versioned by
//     the stream sequence, so the expected view is the last event of each key in the topic,
//     read back from the streams themselves (not from what the clients believe they sent).
//   - The transactional view is examples/counter's: its counts per key and in all must equal
//     the events of the topic, read back the same way. A transactional projection is Go code
//     (no configuration runs one), so the test runs the example program a user would start
//     from, killed and restarted like the projectors.
//   - Tracing (trace_test.go): the processes export to an in-process OTLP receiver
//     (internal/tracing/otlptest), sampling everything, with a short batch delay; the Go
//     client exports its own spans there too, the Node client only sends a traceparent. An
//     event's trace is checked as a graph: parent edges (a parent that was not exported, the
//     Node client's, still joins its children) and links (a batch write to its events). A
//     process SIGKILLed loses the spans it had not exported yet, so the scenario kills a
//     projector once every traced event's spans are in, and checks the events published
//     after; the untraced load's spans are not checked.
//   - The Node client is used when e2e/nodeclient/node_modules exists (make e2e-node); the
//     smoke falls back to a nats.go requester speaking the same protocol when it does not,
//     and says so in the test log; make e2e requires it.
package e2e
