package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/ops/opstest"
)

// TestStatusMatchesPartitionStatusAndCursor: owners, leases, members and lag per partition in
// /v1/ops/status are what partition.Status and the Bus's Cursor say.
func TestStatusMatchesPartitionStatusAndCursor(t *testing.T) {
	s := embeddedtest.NATS(t)
	g := opstest.StartGroup(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Dead letters: two of orders (two reasons), one of payments.
	q, err := dlq.Open(ctx, g.Bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	for _, l := range []struct{ topic, reason string }{{"orders", "permanent"}, {"orders", "decode"}, {"orders", "permanent"}, {"payments", "max-attempts"}} {
		m := nats.NewMsg(dlq.SubjectPrefix + l.topic)
		m.Header.Set(dlq.HeaderReason, l.reason)
		m.Data = []byte(`{}`)
		_, err := g.Bus.JetStream().PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	// And a message ingress refused, kept apart.
	_, err = q.Reject(ctx, dlq.Rejected{Topic: "orders", Source: "in.orders", By: "ingress", Data: []byte(`{`),
		Reason: dlq.ReasonIngress, Err: errors.New("not_json")})
	require.NoError(t, err)

	src := ops.Source{JS: g.Bus.JetStream(), Bus: g.Bus, Topics: []string{"orders", "refunds"},
		Groups: []ops.GroupRef{{Topic: "orders", Group: "projection-to-be"}}}
	srv := httptest.NewServer(ops.Endpoints{Status: func(ctx context.Context) (*ops.Status, error) { return ops.Collect(ctx, src) }}.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/ops/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st ops.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	truth, cur := g.Truth(t)

	require.Len(t, st.Topics, 2)
	assert.Equal(t, ops.TopicStatus{Name: "orders", Partitions: 4, Replicas: 1, Messages: 40, Bytes: st.Topics[0].Bytes, FirstSeq: 1, LastSeq: 40, Declared: true}, st.Topics[0])
	assert.Equal(t, ops.TopicStatus{Name: "refunds", Declared: true, Missing: true}, st.Topics[1])

	require.Len(t, st.Groups, 2, "the consumers' group and the declared one")
	gs := st.Groups[0]
	assert.Equal(t, "billing", gs.Group)
	assert.True(t, gs.Partitioned)
	assert.True(t, gs.Balanced)
	assert.Empty(t, gs.Error)
	require.Len(t, gs.Members, len(truth.Members))
	for i, m := range truth.Members {
		assert.Equal(t, m.ID, gs.Members[i].ID)
	}
	require.Len(t, gs.Partitions, 4)
	owners := map[string]bool{}
	var lag uint64
	for p, ps := range gs.Partitions {
		assert.Equal(t, p, ps.Partition)
		assert.Equal(t, truth.Assignment.Owners[p], ps.Owner, "owner of %d", p)
		assert.Equal(t, truth.Leases[p].State.String(), ps.Lease, "lease of %d", p)
		assert.Equal(t, truth.Leases[p].Owner, ps.LeaseOwner, "lease owner of %d", p)
		pc := cur.Partitions[p]
		assert.Equal(t, pc.AckFloor, ps.AckFloor, "ack floor of %d", p)
		assert.Equal(t, pc.Pending, ps.Pending, "pending of %d", p)
		assert.Equal(t, pc.AckPending, ps.AckPending, "ack pending of %d", p)
		assert.Equal(t, pc.Pending+uint64(pc.AckPending), ps.Lag)
		owners[ps.Owner] = true
		lag += ps.Lag
	}
	assert.Len(t, owners, 2, "two members share the partitions")
	assert.Equal(t, uint64(g.HeldEvents), gs.Partitions[g.Held].Lag, "the held partition lags by its events")
	assert.Equal(t, cur.Lag(), gs.Lag)
	assert.Equal(t, lag, gs.Lag)

	declared := st.Groups[1]
	assert.Equal(t, "projection-to-be", declared.Group)
	assert.False(t, declared.Partitioned)
	assert.Empty(t, declared.Partitions, "no member and no consumer yet")

	assert.True(t, st.DLQ.Exists)
	assert.Equal(t, uint64(4), st.DLQ.Total)
	assert.Equal(t, uint64(1), st.DLQ.Rejects, "the refusal, counted apart")
	assert.Equal(t, map[string]uint64{"orders": 3, "payments": 1}, st.DLQ.ByTopic)
	assert.Equal(t, []ops.ReasonCount{{"orders", "decode", 1}, {"orders", "permanent", 2}, {"payments", "max-attempts", 1}}, st.DLQ.ByReason)
	assert.False(t, st.DLQ.Partial)
}

// TestDLQCountsIncremental: counts kept between statuses follow letters added after the last
// status, and letters removed (replayed, discarded) are counted again.
func TestDLQCountsIncremental(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	add := func(topic, reason string) uint64 {
		m := nats.NewMsg(dlq.SubjectPrefix + topic)
		m.Header.Set(dlq.HeaderReason, reason)
		m.Data = []byte(`{}`)
		ack, err := bus.JetStream().PublishMsg(ctx, m)
		require.NoError(t, err)
		return ack.Sequence
	}
	counts := &ops.DLQCounts{}
	status := func() ops.DLQStatus {
		st, err := ops.Collect(ctx, ops.Source{JS: bus.JetStream(), Bus: bus, DLQ: counts})
		require.NoError(t, err)
		return st.DLQ
	}
	first := add("orders", "permanent")
	add("orders", "decode")
	assert.Equal(t, []ops.ReasonCount{{"orders", "decode", 1}, {"orders", "permanent", 1}}, status().ByReason)
	add("orders", "permanent")
	add("payments", "decode")
	ds := status()
	assert.Equal(t, []ops.ReasonCount{{"orders", "decode", 1}, {"orders", "permanent", 2}, {"payments", "decode", 1}}, ds.ByReason, "the new letters are added")
	assert.False(t, ds.Partial)
	st, err := bus.JetStream().Stream(ctx, dlq.StreamName)
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(ctx, first))
	add("refunds", "decode") // one removed, one added: the totals alone would not tell
	ds = status()
	assert.Equal(t, uint64(4), ds.Total)
	assert.Equal(t, []ops.ReasonCount{{"orders", "decode", 1}, {"orders", "permanent", 1}, {"payments", "decode", 1}, {"refunds", "decode", 1}}, ds.ByReason, "a removed letter is not counted")
	assert.False(t, ds.Partial)
}
