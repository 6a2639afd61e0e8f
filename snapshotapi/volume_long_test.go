//go:build long

package snapshotapi_test

// The volumes of make test-long (volume_short_test.go has make test's).
const (
	readYourWritesRounds = 200
	pagingDocs           = 10000
)
