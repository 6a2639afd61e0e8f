//go:build long

package cmdtest

import "time"

// The full load run (make test-long): 5,000 concurrent keep-alive clients for a minute.
const (
	loadClients  = 5000
	loadDuration = 60 * time.Second
	loadRPS      = 5000
)
