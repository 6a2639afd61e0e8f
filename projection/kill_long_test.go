//go:build long

package projection_test

// The long kill test (`make test-long`): at least ten kills mid-batch.
const (
	killEvents = 30000
	killCount  = 12
)
