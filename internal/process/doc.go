// Package process is what the bridge and projector processes share around their components:
// the Component contract, the Runner that owns every component goroutine, signal handling with
// a bounded graceful shutdown, connections to NATS and MongoDB from the configuration, and Run,
// which ties them to the operations server (package ops).
//
// It does not own the components themselves, nor what they share: package wiring, the
// composition root, turns the configuration into a Spec (Bridge, Projector) and connects the
// one-shot tools. Nor the command line (package cli) or the configuration (package config).
//
// # Lifecycle of a process
//
//  1. The operations server listens first: /healthz answers at once, /readyz says why the
//     process is not ready yet. The paths of a handler that setup mounts there (the
//     projector's snapshot API, Spec.Mounts) wait for it, at most http.request_timeout.
//  2. Connect: NATS (retrying while the servers are unreachable), the JetStream Bus with the
//     process's metrics registry, and MongoDB when a component needs it.
//  3. Setup (the process's own, from package wiring: push schemas, ensure topics, open what
//     the components share) runs once, retried while NATS is unavailable; its error ends
//     the process. It returns the components.
//  4. The Runner starts every component; /readyz turns true when setup is done and every
//     component that can tell says it is ready.
//  5. The first SIGTERM or SIGINT: /readyz turns false, every component's context is
//     cancelled, and each stops fetching, drains its in-flight work and releases its leases.
//     The process exits 0 when all returned within shutdown.timeout, 1 otherwise. A second
//     signal exits at once with status 1.
package process
