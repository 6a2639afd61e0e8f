// Package embeddedtest starts the real servers jetbus's tests and dev mode run against: an
// embedded nats-server with JetStream (one node, or a cluster of three on loopback) and the
// MongoDB test backend of package minimongo.
//
// Every test in the project starts its own servers through this package; no test talks to a
// server it did not start. Setting JETBUS_TEST_MONGO_URI points the MongoDB helpers at a real
// replica set instead of the test backend.
package embeddedtest
