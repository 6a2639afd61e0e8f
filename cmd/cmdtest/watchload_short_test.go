//go:build !long

package cmdtest

import "time"

// The short watch load run of make test: a hundred watchers for a few seconds, one round
// without them and one with. make test-long runs the full one (watchload_long_test.go).
const (
	watchClients      = 100
	watchSteadyRate   = 50
	watchSteadyFor    = 3 * time.Second
	watchRoundEvents  = 5000
	watchRoundPairs   = 1
	watchLoadDeadline = 2 * time.Minute
)
