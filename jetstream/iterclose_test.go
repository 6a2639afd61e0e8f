package jetstream_test

import (
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestStoppedPullIsSeenClosed: a release and a recovery of lost deliveries wait until the
// pull they stopped has unsubscribed its inbox, and they see it as soon as it has, rather
// than after the whole bound of the wait (5 s). nats.go's Closed returns a closed channel
// once a Messages iterator's inbox is unsubscribed, but never closes one it returned
// before: waiting on that one held every recovery and every release for 5 s, and a NATS
// node restart held a partition's events for 5 to 11 s (e2e TestNATSNodeRestarts).
func TestStoppedPullIsSeenClosed(t *testing.T) {
	s := embeddedtest.NATS(t)
	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "CLOSE", Subjects: []string{"close.>"}})
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "CLOSE", natsjs.ConsumerConfig{Durable: "c", AckPolicy: natsjs.AckExplicitPolicy})
	require.NoError(t, err)
	for _, end := range []struct {
		name string
		end  func(natsjs.MessagesContext)
	}{
		{"stopped", natsjs.MessagesContext.Stop},
		{"drained", natsjs.MessagesContext.Drain},
	} {
		t.Run(end.name, func(t *testing.T) {
			// Each time the iterator's goroutine may or may not have unsubscribed when the
			// wait starts: both orders are met in a few rounds.
			for i := range 10 {
				it, err := cons.Messages()
				require.NoError(t, err)
				end.end(it)
				require.True(t, jbjs.IterClosed(it), "round %d: the pull's unsubscribe was not seen", i)
			}
		})
	}
}
