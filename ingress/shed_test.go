package ingress_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestShedLargeWhileBufferFills: while the subscription's buffer is more than half full,
// ingress drops unchecked the messages larger than 1/32 of the room left (a request among
// them is answered unavailable), and checks and stores the rest, small ones included.
//
// Ingress is held (max_in_flight 1, the stream refusing to store) while a client buffers a
// 60 KiB request R, twelve 60 KiB fire-and-forget messages p1…p12 and a small request S in a
// 1 MiB buffer (61,478 bytes each as NATS counts them). Once JetStream stores again, R is
// taken while 799 KB are buffered (NATS counts a message until ingress is done with it): room
// 249 KB, anything over 7.8 KB is shed; so are p1…p4, taken with 738, 676, 615 and 553 KB
// buffered. From p5 on (492 KB) under half of the buffer is held and every message is stored.
func TestShedLargeWhileBufferFills(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	g := e.run(ingress.Config{Allow: []string{"orders"}, MaxInFlight: 1, PendingBytes: 1 << 20, AckTimeout: 300 * time.Millisecond})
	nc := client(t, e.url)
	fillUp(t, e, "orders")

	send := func(id, reply string, body []byte) {
		t.Helper()
		m := nats.NewMsg("in.orders")
		m.Data, m.Reply = body, reply
		m.Header.Set(jetbus.HeaderMsgID, id)
		require.NoError(t, nc.PublishMsg(m))
	}
	// m0 holds the one place (JetStream refuses it: it waits for a retry), m1 waits for it.
	send("m0", "", []byte(`{"n":0}`))
	send("m1", "", []byte(`{"n":1}`))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { st := g.Stats(); return st.Backpressure && st.InFlight == 1 }, wait, 5*time.Millisecond)

	rAnswer, err := nc.SubscribeSync("_INBOX.shed.r")
	require.NoError(t, err)
	sAnswer, err := nc.SubscribeSync("_INBOX.shed.s")
	require.NoError(t, err)
	large := []byte(`{"pad":"` + strings.Repeat("x", 60<<10) + `"}`)
	send("r", "_INBOX.shed.r", large)
	for i := 1; i <= 12; i++ {
		send(fmt.Sprintf("p%d", i), "", large)
	}
	send("s", "_INBOX.shed.s", []byte(`{"n":2}`))
	require.NoError(t, nc.Flush())
	// NATS counts a message as buffered until ingress is done with it: m1 is among them.
	require.Eventually(t, func() bool { return g.Stats().PendingMsgs == 15 }, wait, 5*time.Millisecond, "ingress's buffer holds m1, R, p1…p12 and S")
	assert.Greater(t, g.Stats().PendingBytes, 12*len(large))

	unfill(t, e, "orders")
	r, err := rAnswer.NextMsg(wait)
	require.NoError(t, err)
	ref := decodeErr(t, r)
	assert.Equal(t, string(ingress.CodeUnavailable), ref.Error.Code)
	assert.Contains(t, ref.Error.Message, "dropped unchecked")
	assert.Equal(t, "503", r.Header.Get("Nats-Service-Error-Code"))
	s, err := sAnswer.NextMsg(wait)
	require.NoError(t, err)
	decodeOK(t, s)

	require.Eventually(t, func() bool { return e.count("orders")-1 == 11 }, wait, 10*time.Millisecond, "m0, m1, p5…p12 and S are stored")
	ids := e.ids("orders")
	for _, id := range []string{"m0", "m1", "p5", "p12", "s"} {
		assert.Len(t, ids[id], 1, "%s stored once", id)
	}
	for _, id := range []string{"r", "p1", "p2", "p3", "p4"} {
		assert.Empty(t, ids[id], "%s shed", id)
	}
	st := g.Stats()
	assert.Equal(t, uint64(5), st.Shed)
	assert.Equal(t, 5.0, metricValue(t, g, "ingress_shed_total"))
	assert.Zero(t, st.Dropped)
	assert.True(t, g.logs.logged(slog.LevelWarn, "large messages are dropped unchecked"))

	// A shed message is an error to the micro service, answered (R) or not (p1…p4).
	resp, err := nc.Request("$SRV.STATS.jetbus-ingress", nil, wait)
	require.NoError(t, err)
	var stats struct {
		Endpoints []struct {
			NumErrors int    `json:"num_errors"`
			LastError string `json:"last_error"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(resp.Data, &stats))
	require.Len(t, stats.Endpoints, 1)
	assert.Equal(t, 5, stats.Endpoints[0].NumErrors, "num_errors")
	assert.Equal(t, "503:unavailable", stats.Endpoints[0].LastError, "last_error")
}
