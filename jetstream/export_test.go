package jetstream

import "github.com/jetbus/jetbus"

// Stopping reports whether a subscription of the Bus was told to stop (Stop, Drain or its
// context), for tests that act between the stop and its end.
func Stopping(s jetbus.Subscription) bool { return s.(*subscription).stopping() }
