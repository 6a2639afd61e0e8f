//go:build long

package cmdtest

// The full watch checker (make test-long): 50,000 events over 1,000 keys.
var watchCheck = watchCheckSize{events: 50000, keys: 1000, clients: 24, rate: 1000}
