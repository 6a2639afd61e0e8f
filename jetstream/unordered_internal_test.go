package jetstream

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// natsGoMetadata is what nats.go's own parser reads from an ack subject.
func natsGoMetadata(reply string) (natsjs.MsgMetadata, error) {
	md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
	if err != nil {
		return natsjs.MsgMetadata{}, err
	}
	return natsjs.MsgMetadata{
		Sequence:     natsjs.SequencePair{Stream: md.Sequence.Stream, Consumer: md.Sequence.Consumer},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

// parseAckReply reads what nats.go's own parser reads, from both forms of ack subject.
func TestParseAckReply(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.orders.g_p0.1.7.3.1700000000000000000.12",
		"$JS.ACK._.acchash.orders.g_p0.2.7.3.1700000000000000001.0.random",
		"$JS.ACK.hub.acchash.orders.g_p0.5.70.30.1700000000000000002.4.random",
		"$JS.ACK.hub.acchash.orders.g_p0.5.70.30.1700000000000000002.4", // no last token
		"$JS.ACK.hub.acchash.orders.g_p0.5.70.30.1700000000000000002.4.random.more",
	} {
		var got natsjs.MsgMetadata
		require.NoError(t, parseAckReply(reply, &got), reply)
		want, err := natsGoMetadata(reply)
		require.NoError(t, err, reply)
		assert.Equal(t, want, got, reply)
	}
	var md natsjs.MsgMetadata
	require.NoError(t, parseAckReply("$JS.ACK.orders.g_p0.1.7.3.1700000000000000000.12", &md))
	assert.Equal(t, natsjs.MsgMetadata{Sequence: natsjs.SequencePair{Stream: 7, Consumer: 3}, NumDelivered: 1, NumPending: 12,
		Timestamp: time.Unix(0, 1700000000000000000), Stream: "orders", Consumer: "g_p0"}, md)
	for _, bad := range []string{"", "_INBOX.x", "$JS.ACK.orders.g_p0.1.7.3.17", "$JS.ACK.a.b.orders.g_p0.1.7.3.17"} {
		assert.ErrorIs(t, parseAckReply(bad, &md), errAckSubject, bad)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = parseAckReply("$JS.ACK._.acchash.orders.g_p0.2.7.3.1700000000000000001.0.random", &md)
	}), "parseAckReply allocates")
}

// FuzzParseAckReply checks parseAckReply against nats.go's own parser on any reply subject:
// both refuse it, or both read the same metadata.
func FuzzParseAckReply(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.orders.g_p0.1.7.3.1700000000000000000.12",
		"$JS.ACK._.acchash.orders.g_p0.2.7.3.1700000000000000001.0.random",
		"$JS.ACK.hub.acchash.orders.g_p0.5.70.30.1700000000000000002.4",
		"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k", "$JS.ACK.......", "$JS.ACK.x.y.1.2.3.-4.5", "$JS.ACK.", "",
		"$JS.ACK.orders.g_p0.18446744073709551616.7.3.1.2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		var got natsjs.MsgMetadata
		err := parseAckReply(reply, &got)
		want, wantErr := natsGoMetadata(reply)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, nats.go's %v", reply, err, wantErr)
		}
		if err == nil {
			assert.Equal(t, want, got, reply)
		}
	})
}

// An unordered pull's delivery costs one allocation on the Bus's side: the pulled message,
// which holds its metadata and the Delivery and Event handle makes of it (see "Cost per
// delivery" in the package doc).
func TestUnorderedDeliveryAllocations(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	pc, fm := deliveryFixture()
	pc.sub.opts.Unordered = true
	pc.log = slog.New(slog.DiscardHandler)
	pc.win = newWindow(100, 1000, 0, time.Minute)
	p := &puller{pc: pc, nc: nc}
	m := &nats.Msg{Subject: fm.subject, Reply: fm.reply, Header: fm.header, Data: fm.data}
	handle := pc.handle
	// AllocsPerRun counts the whole process's allocations: goroutines an earlier test left
	// winding down (-count, -race) add theirs. The least of a few measurements is this path's.
	allocs := math.Inf(1)
	for range 5 {
		allocs = min(allocs, testing.AllocsPerRun(1000, func() {
			pm, err := p.take(m)
			if err != nil || pm == nil {
				t.Fatalf("take: %v, %v", pm, err)
			}
			p.deliver(pm, handle)
		}))
	}
	assert.LessOrEqual(t, allocs, 1.0, "allocations per unordered delivery")
}
