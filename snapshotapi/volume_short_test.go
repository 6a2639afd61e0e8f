//go:build !long

package snapshotapi_test

// How much the read-your-writes and paging tests do in make test; make test-long runs the
// larger volumes (volume_long_test.go).
const (
	readYourWritesRounds = 50   // each behind a getMore held 300 ms
	pagingDocs           = 3000 // a walk's pages cost the test backend a sort of the view each
)
