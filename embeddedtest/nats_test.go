package embeddedtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

func TestNATSJetStream(t *testing.T) {
	s := embeddedtest.NATS(t)
	nc := embeddedtest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "t.a", []byte("x"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)
}

func TestClusterStopRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	c := embeddedtest.Cluster(t, 3)
	nc := embeddedtest.Connect(t, c.URLs())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = js.CreateStream(cctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "create R3 stream: %v", err)

	// Stop a node that does not lead the stream; publishes keep being acknowledged.
	var victim int
	require.Eventually(t, func() bool { return c.StreamLeader("$G", "T") >= 0 }, 10*time.Second, 20*time.Millisecond)
	victim = (c.StreamLeader("$G", "T") + 1) % 3
	c.Stop(victim)
	for i := range 10 {
		// A publish may time out while the cluster notices the stopped node; retrying with
		// the same message ID stores it once.
		require.Eventually(t, func() bool {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := js.Publish(pctx, "t.a", []byte{byte(i)}, jetstream.WithMsgID(string(rune('a'+i))))
			return err == nil
		}, 30*time.Second, 100*time.Millisecond)
	}
	c.Restart(victim)
	require.Eventually(t, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := js.Stream(ictx, "T")
		if err != nil {
			return false
		}
		i, err := info.Info(ictx)
		return err == nil && i.State.Msgs == 10 && i.Cluster != nil && len(i.Cluster.Replicas) == 2 && i.Cluster.Replicas[0].Current && i.Cluster.Replicas[1].Current
	}, 20*time.Second, 50*time.Millisecond)
}
