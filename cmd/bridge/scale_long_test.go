//go:build long

package main

// dlqScale is the letters TestDLQCommandsStreamInBoundedMemory stores in make test-long, of
// dlqPad bytes.
const (
	dlqScale = 200_000
	dlqPad   = 2 << 10
)
