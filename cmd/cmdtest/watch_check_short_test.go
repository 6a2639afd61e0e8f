//go:build !long

package cmdtest

// The watch checker of make test: 5,000 events over 200 keys, with the same faults as the
// full run (watch_check_long_test.go, make test-long).
var watchCheck = watchCheckSize{events: 5000, keys: 200, clients: 12, rate: 300}
