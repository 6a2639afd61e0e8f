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
// than after the whole bound of the wait (5 s). For a Messages iterator, nats.go's Closed
// closes its channel only when it is called after the inbox is unsubscribed, not at the
// unsubscribe: waiting on the channel of one call held nearly every recovery and release
// for 5 s, and a NATS node restart held a partition's events for 5 to 11 s (e2e
// TestNATSNodeRestarts). With that wait, a drained round fails nearly always (Drain
// unsubscribes after a round trip to the server), a stopped one most of the time.
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
			// The iterator's goroutine may or may not have unsubscribed when the wait
			// starts: a few rounds, as the order is up to the scheduler.
			for i := range 10 {
				it, err := cons.Messages()
				require.NoError(t, err)
				end.end(it)
				require.True(t, jbjs.IterClosed(it), "round %d: the pull's unsubscribe was not seen", i)
			}
		})
	}
}
