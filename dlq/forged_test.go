package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
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

// TestForgedReplayIsDeliveredToEveryGroup: a replay records what it published under the
// replayed event's ID. An event a raw NATS client publishes later with that ID and another
// body is not that event: every group handles it, the replay's own group included, and it is
// counted once per group.
func TestForgedReplayIsDeliveredToEveryGroup(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	require.NoError(t, e.bus.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "mail", Partitions: 1, DuplicateWindow: 100 * time.Millisecond}))
	ctx := t.Context()
	var mu sync.Mutex
	fixed := false
	handled := map[string][]string{} // group -> bodies of the events with a replay ID
	for _, g := range []string{"sender", "audit"} {
		sub, err := e.bus.Subscribe(ctx, "mail", g, func(_ context.Context, d *jetbus.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if g == "sender" && !fixed {
				return jetbus.Permanent(errors.New("down"))
			}
			if strings.HasPrefix(d.ID, "replay:") {
				handled[g] = append(handled[g], string(d.Payload))
			}
			return nil
		}, jetbus.FromEarliest(), fast)
		require.NoError(t, err)
		defer sub.Stop()
	}
	_, err := e.bus.Publish(ctx, "mail", body{Key: "k", N: 1}, jetbus.WithKey("k"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(dlq.Filter{}) == 1 }, wait, 10*time.Millisecond)
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	id := dlq.ReplayID(ls[0])
	mu.Lock()
	fixed = true
	mu.Unlock()
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled["sender"]) == 1 }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool { return e.lag("mail", "audit") == 0 }, wait, 10*time.Millisecond)

	// A raw client, no jetbus on its side, publishes another body with the replay's ID once
	// the topic's duplicate window is over. The server forgets an ID when its purge timer
	// runs, some time after the window: until then the publish is dropped as a duplicate
	// (nothing stored), so it is published again until it is stored.
	nc, err := nats.Connect(e.srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	raw, err := natsjs.New(nc)
	require.NoError(t, err)
	m := nats.NewMsg("mail.p0")
	m.Header.Set("Nats-Msg-Id", id)
	m.Header.Set("x-key", "k")
	m.Data = []byte(`{"key":"k","n":666}`)
	require.True(t, embeddedtest.Poll(wait, 20*time.Millisecond, func() bool {
		ack, err := raw.PublishMsg(ctx, m)
		require.NoError(t, err)
		return !ack.Duplicate
	}), "the server forgets the replay's ID after the topic's duplicate window")

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled["sender"]) == 2 && len(handled["audit"]) == 1
	}, wait, 10*time.Millisecond, "both groups handle the forged event")
	mu.Lock()
	assert.Equal(t, []string{`{"key":"k","n":1}`, `{"key":"k","n":666}`}, handled["sender"], "the replay, then the forged event")
	assert.Equal(t, []string{`{"key":"k","n":666}`}, handled["audit"], "the replay skipped, the forged event handled")
	mu.Unlock()
	assert.Equal(t, 2.0, metric(t, e.reg, "dlq_replay_mismatches_total"), "counted once per group")
}
