// Command peers measures the jetbus Bus against what a Go user would pick instead, in one
// process against one embedded nats-server: Watermill's NATS JetStream Pub/Sub
// (watermill-nats/v2 pkg/nats) and raw nats.go (package jetstream). It prints a Markdown
// table for BENCHMARKS.md ("Peers (bench/peers)").
//
// It owns the peer comparison only. The Bus's own benchmarks against raw nats.go live next to
// the code they measure (jetstream/bench_test.go, partition/bench_test.go); this program is a
// module of its own (bench/peers/go.mod, jetbus replaced by ../..) so that Watermill never
// enters jetbus's module graph, and the root's `go test ./...` and `go vet ./...` do not see it.
//
// Usage (make bench-peers runs it with the defaults):
//
//	go run . [-rounds 5] [-publish 50000] [-sync 5000] [-consume 100000] [-partitioned 100000]
//	         [-partitions 16] [-wm-publishers 16] [-scenarios publish,sync,consume,decode,partitions]
//	         [-sides 'PART;PART'] [-cpuprofile FILE]
//
// -sides runs only the sides whose name contains one of the ';'-separated parts (the ratios
// are then to the first side kept), for comparing a few sides over many rounds.
//
// # Scenarios
//
//   - publish: acknowledged publish throughput of the same 70-byte JSON body. The Bus
//     (PublishAsync) and raw nats.go (PublishMsgAsync with a Nats-Msg-Id) publish
//     asynchronously and wait for every ack; Watermill's Publish has no asynchronous form (it
//     waits for each ack), so it runs once from one goroutine and once from -wm-publishers
//     goroutines.
//   - sync: one synchronous publish at a time; p50 and p99 of each round.
//   - consume, decode: consume and acknowledge -consume stored events from a one-subject
//     stream (a one-partition jetbus topic) with a handler that does nothing, or that decodes
//     the JSON body into a map[string]any. Timed from subscribing (consumer creation
//     included) until the server's consumer state shows every event delivered and
//     acknowledged (NumPending and NumAckPending zero): acks confirmed at the server's ack
//     floor, not merely sent. Sides: the Bus (Subscribe: an ordered group, pinned; and
//     Subscribe with Unordered: no pin), Watermill's subscriber with AckAsync (its fastest)
//     and with its defaults (each ack awaited), and raw durable pull consumers read with
//     Messages and Ack: PullMaxMessages(100) (what a Go user writes first), and with the
//     window the Bus grows to (1000) on a consumer like an unordered group's (no priority
//     policy) and like an ordered group's (pinned). The table compares every side with the
//     Bus's ordered side and with its unordered one.
//   - partitions: the same with a do-nothing handler on a -partitions topic, through one
//     partition.Subscribe member against one raw pull consumer per partition, each in its
//     own goroutine. Watermill has no partitions and is not in it.
//
// # Choices
//
//   - Every stream is a jetbus topic created by Bus.EnsureTopic (file storage, limits
//     retention, 2-minute duplicate window), so the sides differ only in the client. Each
//     application side consumes what its own publisher stores (the Bus's events with their
//     headers, Watermill's messages with its UUID header, raw messages with a Nats-Msg-Id
//     only), but the two raw clients of consumers set up like the Bus's ("window 1000",
//     "pinned, window 1000") read the Bus's own events: they are the ceiling of a client of
//     the same consumer, receiving the same messages (the Bus's carry two more headers than
//     a raw publisher's, x-ts and content-type, which every client of them parses). The
//     stores are filled once, before the timed rounds.
//   - Each round runs every side once, in an order rotated by one each round, so every side
//     goes first in some round and load from elsewhere (and work the server defers from the
//     previous side) falls on all alike; runtime.GC runs before each side. The table gives
//     min, median and max over the rounds and the ratio of medians jetbus ÷ side: above 1 the
//     Bus is faster for throughput, below 1 it is faster for latency. A second table divides
//     the Bus's figure by each side's within each round and gives the median (min–max) of
//     those paired ratios: on a shared machine whose speed drifts by more than the margins
//     measured, the rounds' pairs cancel the drift, and their median is the steadier figure
//     (use many rounds: -rounds 21 or more).
//   - Every consume side gets a fresh connection and a fresh durable consumer per round,
//     deleted afterwards; publishing sides keep one connection for the scenario and the
//     stream is purged before each timed run.
//   - Server and clients share the process, so they share the garbage collector and the
//     cores: a side's allocations cost the server time as well.
//   - Beside each rate or latency the table gives the process's CPU time (user + system)
//     per event during the side's run: the client's work and the server's work it causes.
//     With one message in flight at a time (sync publish, Watermill's awaited acks) it is
//     mostly system calls and waking goroutines and threads, more than the sides' own work.
//   - With -cpuprofile, every side runs under pprof labels "scenario" and "side", which the
//     goroutines its client starts inherit (the server's goroutines carry nats-server's own
//     labels, such as "stream" and "consumer"): go tool pprof -tags, or
//     -tagfocus 'side=jetbus (Subscribe)', splits the profile by side.
package main
