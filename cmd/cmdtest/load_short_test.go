//go:build !long

package cmdtest

import "time"

// The short load run of make test: a few hundred clients for a few seconds. make test-long
// runs the full one (load_long_test.go).
const (
	loadClients  = 300
	loadDuration = 5 * time.Second
	loadRPS      = 1500
)
