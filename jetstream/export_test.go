package jetstream

import (
	"context"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

// Stopping reports whether a subscription of the Bus was told to stop (Stop, Drain or its
// context), for tests that act between the stop and its end.
func Stopping(s jetbus.Subscription) bool { return s.(*subscription).stopping() }

// ResetConsumer resets the consumer of group's partition p of topic to its ack floor, as a
// take-over or a recovery does, and returns the consumer's state as the reset left it (as
// its leader reported it when it applied the reset).
func ResetConsumer(ctx context.Context, b *Bus, topic, group string, p int) (*natsjs.ConsumerInfo, error) {
	return b.resetConsumerInfo(ctx, jetbus.StreamName(topic), jetbus.ConsumerName(group, p), 0)
}

// IterClosed waits, as a release or a recovery does, until a stopped or drained pull's inbox
// is unsubscribed, and reports whether it saw that before giving up.
func IterClosed(it natsjs.MessagesContext) bool { return iterClosed(it) }

// PullWakes is how many times the ordered pulls of s had their waiting Next woken
// (wake.go).
func PullWakes(s jetbus.Subscription) uint64 {
	var n uint64
	for _, pc := range s.(*subscription).parts {
		n += pc.wakes.Load()
	}
	return n
}

// WakesPerSpell is how many times an ordered pull's Next is woken in one quiet spell before
// its wake rests until the next delivery.
func WakesPerSpell() int { return len(wakeAfter) }
