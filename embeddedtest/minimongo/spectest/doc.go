// Package spectest runs MongoDB's own specification tests in the unified test format
// (github.com/mongodb/specifications) against the minimongo backend, through the official
// Go driver (go.mongodb.org/mongo-driver/v2), each test against a fresh backend, so the
// claim that the backend behaves like MongoDB is measured with the tests MongoDB's drivers
// are held to. The package has no code besides its test.
//
// # Where the tests come from
//
// The JSON files are not copied into this repository: the runner reads them from the
// testdata directory of go.mongodb.org/mongo-driver v1.17.10 (v1 of the Go driver ships
// the specification tests in its module; v2 takes them from a git submodule the module
// proxy does not serve), which it locates with `go mod download -json` at test time:
// from the module cache, or through GOPROXY. Where neither is available (offline with an
// empty module cache) the test skips, saying so. The areas run are crud, change-streams,
// transactions, sessions, retryable-writes, index-management, collection-management and
// run-command: the files of those directories in the unified format (v1.17.10 still keeps
// most transactions and retryable-writes tests in the legacy format, which is not run).
//
// # Applicable tests
//
// A test is applicable when a MongoDB 7.0 single-member replica set without
// authentication could run it: it has no skipReason, one of its file's and one of its own
// runOnRequirements is satisfied (minServerVersion ≤ 7.0 ≤ maxServerVersion; topologies,
// if given, include "replicaset"; serverless not "require"d; no auth, authMechanism or
// csfle requirement; no serverParameters requirement, which the runner cannot check), and
// it creates no clientEncryption or GridFS bucket entity. Every applicable test counts:
// one the runner cannot express through the Go driver v2 (socketTimeoutMS, wtimeoutMS,
// maxTimeMS on an operation, a session's dirty flag, getMore options of
// runCursorCommand, ...) counts as a failure, never as skipped.
//
// # Running
//
//	make spec-mongo
//	go test -count=1 -v -run TestUnifiedSpec ./embeddedtest/minimongo/spectest/ -args -spec.all -spec.v
//
// prints the pass rate per area and overall, and fails below 85% (-spec.min); -spec.v
// lists each failing test with its reason, -spec.run selects tests by a regular expression
// on "area/file/description", -spec.dir <checkout>/source reads the tests of a
// github.com/mongodb/specifications checkout instead (newer, with the transactions and
// retryable-writes tests in the unified format too). Without -spec.all (as make test runs
// it) every second applicable test runs, and the run fails when that sample passes below
// 85%.
//
// # Figures
//
// Measured with make spec-mongo (BENCHMARKS.md has the table per area): 305 of 324
// applicable tests pass (94.1%); 136 tests are not applicable.
package spectest
