//go:build race

package main

// dlqScale is the letters TestDLQCommandsStreamInBoundedMemory stores, of dlqPad bytes: under
// the race detector, which makes the bridge and the NATS server ten times slower, a fifth of
// make test's 20,000, eight times larger, so that holding them would still show.
const (
	dlqScale = 4_000
	dlqPad   = 16 << 10
)
