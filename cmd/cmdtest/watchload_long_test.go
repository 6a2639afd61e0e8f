//go:build long

package cmdtest

import "time"

// The full watch load run (make test-long): 2,000 watchers, 30 s of changes at 50 a second,
// then bursts of 100,000 events, two without the watchers and two with them, alternately
// (a burst takes seconds without them, minutes with them).
const (
	watchClients      = 2000
	watchSteadyRate   = 50
	watchSteadyFor    = 30 * time.Second
	watchRoundEvents  = 100000
	watchRoundPairs   = 2
	watchLoadDeadline = 10 * time.Minute
)
