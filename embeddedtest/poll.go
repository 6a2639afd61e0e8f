package embeddedtest

import "time"

// Poll calls cond every interval until it holds or within has passed, and says whether it
// held. Unlike testify's Eventually, cond runs in the caller's goroutine: what it assigns is
// safe to read afterwards, and a cond that uses the test's resources cannot outlive the test.
func Poll(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
