package jetstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// lostAck makes the next publish to topic's partitions go unacknowledged, as when a stream's
// leader stops with the message in flight: the stream is deleted, and a plain subscriber
// takes (and never answers) the first message that arrives, then has the stream made again,
// so that only a second copy of that message can be stored and acknowledged.
//
// Another stream is kept beside it: nats-server removes an account's store directories in a
// goroutine once its last stream is deleted (if they are empty), which races a stream created
// just then ("could not create storage directory").
func lostAck(t *testing.T, s interface{ ClientURL() string }, admin *jbjs.Bus, topic string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "lostack.keep"}))
	require.NoError(t, admin.JetStream().DeleteStream(ctx, jetbus.StreamName(topic)))
	nc := embeddedtest.Connect(t, s.ClientURL())
	var once sync.Once
	recreated := make(chan error, 1)
	_, err := nc.Subscribe(topic+".>", func(*nats.Msg) {
		once.Do(func() {
			go func() { recreated <- admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic}) }()
		})
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() {
		select {
		case err := <-recreated:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the stream was not made again")
		}
	})
}

// A publish whose acknowledgement is lost is sent again after the resend interval, with its
// event ID, and stored once: Publish and PublishAsync's Wait succeed within their contexts
// instead of waiting them out, report no duplicate, and the resend is counted.
func TestPublishResendsWhenTheAckIsLost(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	reg := prometheus.NewRegistry()
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithRegisterer(reg), jbjs.WithResendAfter(50*time.Millisecond))

	for _, async := range []bool{false, true} {
		topic := map[bool]string{false: "sync", true: "async"}[async]
		require.NoError(t, admin.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: topic}))
		_, err := b.Publish(t.Context(), topic, 0) // the Bus knows the topic from here on
		require.NoError(t, err)
		lostAck(t, s, admin, topic)

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var e *jetbus.Event
		dup := true
		if async {
			fut, err := b.PublishAsync(ctx, topic, 1, jetbus.WithID("ev-"+topic))
			require.NoError(t, err)
			e, err = fut.Wait(ctx)
			require.NoError(t, err, "the resend is acknowledged within the wait")
			dup = fut.Duplicate()
			again, err := fut.Wait(ctx)
			require.NoError(t, err, "a second Wait answers the same")
			assert.Equal(t, e.Seq, again.Seq)
		} else {
			e, err = b.Publish(ctx, topic, 1, jetbus.WithID("ev-"+topic))
			require.NoError(t, err, "the resend is acknowledged within the publish's context")
			dup = false
		}
		cancel()
		assert.False(t, dup, "the resend of a publish is no duplicate to its caller")
		assert.Equal(t, uint64(1), e.Seq, "stored once, in the stream made again")
		assert.Equal(t, uint64(1), streamMsgs(t, admin, topic))
	}
	assert.GreaterOrEqual(t, metricValue(t, reg, "events_publish_resent_total"), 2.0)
}

// A publish answered with an error is not sent again, and one whose context ends first
// returns its context's error.
func TestPublishResendLimits(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithResendAfter(20*time.Millisecond))
	require.NoError(t, admin.EnsureTopic(t.Context(), jbjs.TopicConfig{Name: "orders"}))
	_, err := b.Publish(t.Context(), "orders", 0)
	require.NoError(t, err)

	// Nobody stores or answers: the context ends the resends.
	require.NoError(t, admin.JetStream().DeleteStream(t.Context(), jetbus.StreamName("orders")))
	nc := embeddedtest.Connect(t, s.ClientURL())
	n := 0
	var mu sync.Mutex
	_, err = nc.Subscribe("orders.>", func(*nats.Msg) { mu.Lock(); n++; mu.Unlock() })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	fut, err := b.PublishAsync(ctx, "orders", 1)
	require.NoError(t, err)
	_, err = fut.Wait(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, nc.Flush()) // the copies sent have arrived
	mu.Lock()
	sent := n
	mu.Unlock()
	// Resends at 20, 60, 140 and 300 ms: a few copies, the interval doubling, not one per 20 ms.
	assert.GreaterOrEqual(t, sent, 2)
	assert.LessOrEqual(t, sent, 6)

	// An answer, here that no stream takes the subject any more, ends it: no resend.
	nc.Close()
	_, err = b.Publish(t.Context(), "orders", 1)
	assert.ErrorIs(t, err, jetbus.ErrTopicNotFound, "no responders: not sent again")
}

// "No responders" from a stream that exists — as while its leader is being elected — is no
// reason to give a publish up: Publish and PublishAsync's Wait ask again until a replica
// answers (here: until the stream takes the subject again), within their contexts.
func TestPublishWaitsOutAnElection(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	reg := prometheus.NewRegistry()
	b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithRegisterer(reg), jbjs.WithResendAfter(50*time.Millisecond))
	ctx := t.Context()
	for _, async := range []bool{false, true} {
		topic := map[bool]string{false: "sync", true: "async"}[async]
		require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic}))
		_, err := b.Publish(ctx, topic, 0)
		require.NoError(t, err)
		before := metricValue(t, reg, "events_publish_resent_total")
		st, err := admin.JetStream().Stream(ctx, jetbus.StreamName(topic))
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		subjects := cfg.Subjects
		cfg.Subjects = []string{"nowhere." + topic}
		_, err = admin.JetStream().UpdateStream(ctx, cfg) // nobody answers on the topic's subjects
		require.NoError(t, err)

		done := make(chan error, 1)
		go func() {
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if async {
				fut, err := b.PublishAsync(pctx, topic, 1)
				if err == nil {
					_, err = fut.Wait(pctx)
				}
				done <- err
				return
			}
			_, err := b.Publish(pctx, topic, 1)
			done <- err
		}()
		require.Eventually(t, func() bool { return metricValue(t, reg, "events_publish_resent_total") >= before+2 },
			10*time.Second, 10*time.Millisecond, "the publish is sent again while nobody answers")
		select {
		case err := <-done:
			t.Fatalf("the publish ended while the stream did not answer: %v", err)
		default:
		}
		cfg.Subjects = subjects
		_, err = admin.JetStream().UpdateStream(ctx, cfg)
		require.NoError(t, err)
		select {
		case err := <-done:
			require.NoError(t, err, "stored once the stream answers")
		case <-time.After(15 * time.Second):
			t.Fatal("the publish did not end after the stream answered again")
		}
		assert.Equal(t, uint64(2), streamMsgs(t, admin, topic))
	}
}
