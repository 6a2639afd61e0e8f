package dlq_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// TestSweeperMovesOnlyWhatTheServerConfirms: MAX_DELIVERIES advisories forged by a raw
// client — naming a KV stream, a consumer that does not exist, an acknowledged message, or
// fewer deliveries than the consumer allows — move nothing into the DLQ and are counted.
func TestSweeperMovesOnlyWhatTheServerConfirms(t *testing.T) {
	e := newEnv(t, dlq.Config{Parking: true})
	e.topic("mail", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One event, handled and acknowledged by group g.
	done := make(chan struct{}, 1)
	sub, err := e.bus.Subscribe(ctx, "mail", "g", func(context.Context, *jetbus.Delivery) error {
		done <- struct{}{}
		return nil
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(3), fast)
	require.NoError(t, err)
	defer sub.Stop()
	ev, err := e.bus.Publish(ctx, "mail", body{N: 1}, jetbus.WithKey("k"))
	require.NoError(t, err)
	<-done
	require.Eventually(t, func() bool { return e.lag("mail", "g") == 0 }, wait, 10*time.Millisecond)
	_, err = e.bus.JetStream().KeyValue(ctx, dlq.ParkBucket)
	require.NoError(t, err, "the parking bucket exists: a KV stream to aim at")

	forge := func(stream, consumer string, seq uint64, deliveries int) {
		b, _ := json.Marshal(map[string]any{"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": stream,
			"consumer": consumer, "stream_seq": seq, "deliveries": deliveries})
		_, err := e.bus.JetStream().Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+stream+"."+consumer, b)
		require.NoError(t, err)
	}
	forge("KV_"+dlq.ParkBucket, "g_p0", 1, 3)
	forge(jetbus.StreamName("mail"), "nope_p0", ev.Seq, 3)
	forge(jetbus.StreamName("mail"), "g_p0", ev.Seq, 3) // acknowledged
	forge(jetbus.StreamName("mail"), "g_p0", ev.Seq, 1) // fewer than MaxDeliver
	forge(jetbus.StreamName("mail"), "g_p1", ev.Seq, 3) // not the message's partition

	swept := make(chan error, 1)
	go func() { swept <- e.q.RunSweeper(ctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-swept }()
	adv, err := e.bus.JetStream().Stream(ctx, dlq.AdvisoryStreamName)
	require.NoError(t, err)
	require.True(t, embeddedtest.Poll(wait, 10*time.Millisecond, func() bool {
		i, err := adv.Info(ctx)
		return err == nil && i.State.Msgs == 0
	}), "the sweeper took every advisory")
	assert.Zero(t, e.count(dlq.Filter{}), "nothing was moved into the DLQ")
	n, err := testutil.GatherAndCount(e.reg, "dlq_advisories_refused_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "dlq_advisories_refused_total" {
			assert.Equal(t, 5.0, mf.GetMetric()[0].GetCounter().GetValue(), "each counted")
		}
	}
}
