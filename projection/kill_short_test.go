//go:build !long

package projection_test

// The normal run's kill test: a few kills. `make test-long` (build tag long) kills more.
const (
	killEvents = 3000
	killCount  = 3
)
