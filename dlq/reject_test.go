package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
)

// TestRejectAndReplay: a message refused before it reached its topic is kept, stored once
// however often it is refused, and replayed to every group.
func TestRejectAndReplay(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("orders", 1)
	ctx := t.Context()
	r := dlq.Rejected{
		Topic: "orders", Source: "in.orders", By: "ingress", ID: "client-1", Key: "o-1",
		Header: nats.Header{"x-note": {"kept"}}, Data: []byte(`{"total":"twelve"}`),
		Reason: dlq.ReasonIngress, Err: errors.New("schema: /total must be a number"),
	}
	seq, err := e.q.Reject(ctx, r)
	require.NoError(t, err)
	again, err := e.q.Reject(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, seq, again, "a retried refusal is stored once")
	_, err = e.q.Reject(ctx, dlq.Rejected{Topic: "Not A Topic", Source: "in.Not A Topic", By: "ingress", Data: []byte("x"), Reason: dlq.ReasonIngress, Err: errors.New("bad_topic")})
	require.NoError(t, err)

	ls, err := e.q.List(ctx, dlq.Filter{Topic: "orders"}, 0)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	l := ls[0]
	assert.True(t, l.Rejected())
	assert.Equal(t, "ingress", l.Group)
	assert.Equal(t, dlq.ReasonIngress, l.Reason)
	assert.Equal(t, "in.orders", l.OriginalSubject)
	assert.Equal(t, "client-1", l.OriginalID)
	assert.Equal(t, "o-1", l.Key)
	assert.Contains(t, l.Error, "must be a number")
	assert.Equal(t, 2, e.count(dlq.Filter{}), "the unrouted one is kept too")

	var mu sync.Mutex
	got := map[string]string{}
	for _, g := range []string{"a", "b"} {
		sub, err := e.bus.Subscribe(ctx, "orders", g, func(_ context.Context, d *jetbus.Delivery) error {
			mu.Lock()
			got[g] = d.Key + " " + d.Header("x-note")
			mu.Unlock()
			return nil
		}, jetbus.FromEarliest(), fast)
		require.NoError(t, err)
		defer sub.Stop()
	}
	// A refusal is replayed only to a topic open to ingress now, or with Force.
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}, IngressTopics: []string{"payments"}})
	require.NoError(t, err)
	assert.Zero(t, rep.Replayed)
	require.Len(t, rep.Failed, 1)
	for _, err := range rep.Failed {
		assert.ErrorIs(t, err, dlq.ErrNotReplayable)
		assert.ErrorContains(t, err, `topic "orders" is not open to ingress`)
	}
	rep, err = e.q.Replay(ctx, e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}, IngressTopics: []string{"orders"}})
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Replayed)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, wait, 10*time.Millisecond,
		"every group gets a replayed rejection")
	assert.Equal(t, map[string]string{"a": "o-1 kept", "b": "o-1 kept"}, got)
}

// TestRejectsOfInventedTopicsShareOneSeries: 300 refused messages to invented topics make one
// metric series, not 300, and one subject of DLQ_REJECTS (the server keeps state per
// subject); the letters keep their topics, and a filter by topic finds them.
func TestRejectsOfInventedTopicsShareOneSeries(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	ctx := t.Context()
	for i := range 300 {
		topic := "junk" + strconv.Itoa(i)
		h := nats.Header{dlq.HeaderTopic: {"forged"}}
		_, err := e.q.Reject(ctx, dlq.Rejected{Topic: topic, Source: "in." + topic, By: "ingress", Data: []byte(`{}`), Header: h,
			Reason: dlq.ReasonIngress, Err: errors.New("not_allowed"), Unlisted: true})
		require.NoError(t, err)
	}
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	series := 0
	for _, mf := range mfs {
		if mf.GetName() == "dlq_dead_letters_total" {
			for _, m := range mf.GetMetric() {
				series++
				for _, l := range m.GetLabel() {
					if l.GetName() == "topic" {
						assert.Equal(t, dlq.OtherTopic, l.GetValue())
					}
				}
				assert.Equal(t, 300.0, m.GetCounter().GetValue())
			}
		}
	}
	assert.Equal(t, 1, series)

	// And one of a topic the rejecter serves, with a client's header of the DLQ's name.
	_, err = e.q.Reject(ctx, dlq.Rejected{Topic: "junk7", Source: "in.junk7", By: "ingress", Data: []byte(`{}`),
		Header: nats.Header{dlq.HeaderTopic: {"junk8"}}, Reason: dlq.ReasonIngress, Err: errors.New("schema")})
	require.NoError(t, err)
	s, err := e.bus.JetStream().Stream(ctx, dlq.RejectsStreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(">"))
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{dlq.RejectsOtherSubject: 300, "dlq_rejects.junk7": 1}, info.State.Subjects,
		"invented names make no subjects")
	ls, err := e.q.List(ctx, dlq.Filter{Topic: "junk8"}, 0)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, "junk8", ls[0].Topic)
	assert.Equal(t, "in.junk8", ls[0].OriginalSubject)
	assert.Equal(t, 2, e.count(dlq.Filter{Topic: "junk7"}), "the refusals of junk7, under either subject")
	all, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	topics := map[string]bool{}
	for _, l := range all {
		topics[l.Topic] = true
	}
	assert.Len(t, topics, 300, "every letter keeps its topic; a client's header says nothing")
}

// TestForceReplaysARefusalAnywhere: --force replays a refusal to a topic ingress does not
// serve, saying so.
func TestForceReplaysARefusalAnywhere(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("payments", 1)
	ctx := t.Context()
	_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "payments", Source: "in.payments", By: "ingress", Data: []byte(`{"n":1}`),
		Reason: dlq.ReasonIngress, Err: errors.New("not_allowed: topic \"payments\" is not open to ingress")})
	require.NoError(t, err)
	rep, err := e.q.Replay(ctx, e.bus, dlq.ReplayOptions{IngressTopics: []string{"orders"}})
	require.NoError(t, err)
	assert.Zero(t, rep.Replayed, "a client cannot reach payments through the DLQ")
	rep, err = e.q.Replay(ctx, e.bus, dlq.ReplayOptions{IngressTopics: []string{"orders"}, Force: true})
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Replayed, "an operator can, on purpose")
}

// TestRefusalsParkNothing: with parking on, a refused message with a key parks nothing — no
// delivery waits behind it — so a flood of refusals with invented keys does not fill the
// parking bucket.
func TestRefusalsParkNothing(t *testing.T) {
	e := newEnv(t, dlq.Config{Parking: true})
	ctx := t.Context()
	for i := range 20 {
		_, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", Key: "k" + strconv.Itoa(i),
			Data: []byte(`{}`), Reason: dlq.ReasonIngress, Err: errors.New("schema")})
		require.NoError(t, err)
	}
	kv, err := e.bus.JetStream().KeyValue(ctx, dlq.ParkBucket)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Values(), "nothing parked")
	assert.Equal(t, 20, e.count(dlq.Filter{}))
}

// TestRefusalIDsStayFewAndSmall: nats-server keeps every ID of a stream's duplicate window in
// memory, whether or not the message is still stored. DLQ_REJECTS remembers refusals' IDs for
// RejectsDuplicateWindow (the handlers' DLQ keeps its 24 hours), and a client's long ID is
// remembered as its SHA-256: a flood of refusals with 1 KiB IDs cannot grow the server's
// memory for a day. A retried refusal is still stored once.
func TestRefusalIDsStayFewAndSmall(t *testing.T) {
	e := newEnv(t, dlq.Config{MaxAge: dlq.DefaultMaxAge, Rejects: dlq.RejectsConfig{MaxAge: dlq.DefaultRejectsMaxAge}})
	ctx := t.Context()
	dup := func(stream string) time.Duration {
		s, err := e.bus.JetStream().Stream(ctx, stream)
		require.NoError(t, err)
		return s.CachedInfo().Config.Duplicates
	}
	assert.Equal(t, dlq.RejectsDuplicateWindow, dup(dlq.RejectsStreamName))
	assert.Equal(t, dlq.DefaultDuplicateWindow, dup(dlq.StreamName))

	long := strings.Repeat("i", 1000)
	reject := func(id string) uint64 {
		seq, err := e.q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", ID: id,
			Data: []byte(`{}`), Reason: dlq.ReasonIngress, Err: errors.New("schema")})
		require.NoError(t, err)
		return seq
	}
	first := reject(long + "1")
	assert.Equal(t, first, reject(long+"1"), "a retried refusal is stored once")
	assert.NotEqual(t, first, reject(long+"2"), "another long ID is another refusal")
	short := reject("c-1")
	ls, err := e.q.List(ctx, dlq.Filter{}, 0)
	require.NoError(t, err)
	require.Len(t, ls, 3)
	for _, l := range ls {
		id := l.Header.Get(jetbus.HeaderMsgID)
		assert.LessOrEqual(t, len(id), 92, "%.60s", id)
		if l.Seq == short {
			assert.Equal(t, "dlq:rejected:ingress:c-1", id, "a short ID as it is")
		} else {
			assert.Len(t, l.OriginalID, len(long)+1, "the letter keeps the whole ID")
		}
	}
}
