//go:build !race

package main

// dlqScale is the letters TestDLQCommandsStreamInBoundedMemory stores, of dlqPad bytes.
const (
	dlqScale = 20_000
	dlqPad   = 2 << 10
)
