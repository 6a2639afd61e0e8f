// Package embeddedtest starts the real servers jetbus's tests and dev mode run against: an
// embedded nats-server with JetStream (one node, or a cluster of three on loopback) and the
// MongoDB test backend of package minimongo.
//
// Every test in the project starts its own servers through this package; no test talks to a
// server it did not start. Setting JETBUS_TEST_MONGO_URI points the MongoDB helpers at a real
// replica set instead of the test backend.
//
// It also runs the programs under test as processes: Start runs a command as a child of the
// test, collects its output, stops it by a signal (Process.Stop, Process.Kill) and kills it
// when the test ends; TestMain and ChildCommand make the test binary, re-executed, the program
// itself (its main). SyncBuffer is the buffer such output is polled from, and Poll the one
// deadline-bound wait. StreamUpdates lists the stream updates a connection sent, for tests of
// what a process asks of JetStream.
package embeddedtest
