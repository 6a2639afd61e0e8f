package projection

import "github.com/jetbus/jetbus/partition"

// WithWaitHook calls f with the subscribers once Run has started them, before it waits for
// its context or a subscriber to end; reported counts the subscribers Run has seen ended.
func WithWaitHook(f func(subs []*partition.Subscriber, reported func() int)) Option {
	return func(o *settings) error { o.waitHook = f; return nil }
}
