package ingress_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestFloodOfRefusals: one client sends refused 256 KiB messages as fast as it can while
// another sends valid fire-and-forget events: every valid event is stored, the DLQ stays
// within its bound, and ingress stays ready. The refused messages come faster than ingress
// checks them (most are shed): without shedding they would keep NATS's buffer for ingress full
// and, on a loaded machine, NATS would drop valid events with them. (floodDuration and floodValid: a few seconds in
// make test, 30 s and 20,000 with -tags long.)
func TestFloodOfRefusals(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 4})
	ctx := context.Background()
	const dlqBound = 16 << 20
	bounded, err := dlq.Open(ctx, e.js, dlq.Config{Rejects: dlq.RejectsConfig{MaxBytes: dlqBound}}) // the bridge's own bound, applied
	require.NoError(t, err)
	defer bounded.Close()
	g := e.run(ingress.Config{Allow: []string{"orders"}, MaxMessageSize: 512 << 10})

	flooder := client(t, e.url)
	refused := []byte(`{"pad":"` + strings.Repeat("x", 256<<10) + `"`) // not JSON: refused, dead-lettered
	var flooded atomic.Int64
	stop := make(chan struct{})
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if flooder.Publish("in.orders", refused) != nil {
				return
			}
			flooded.Add(1)
		}
	}()

	sender := client(t, e.url)
	start := time.Now()
	pace := time.NewTicker(floodDuration * 100 / floodValid * 8 / 10)
	defer pace.Stop()
	for i := range floodValid {
		m := &nats.Msg{Subject: "in.orders", Data: fmt.Appendf(nil, `{"n":%d}`, i), Header: nats.Header{}}
		m.Header.Set(jetbus.HeaderMsgID, fmt.Sprintf("valid-%d", i))
		m.Header.Set("x-key", fmt.Sprintf("k%d", i%100))
		require.NoError(t, sender.PublishMsg(m))
		if i%100 == 99 { // spread over the flood: a hundred every floodDuration/(floodValid/100)
			require.NoError(t, sender.Flush())
			<-pace.C
		}
	}
	require.NoError(t, sender.Flush())
	// Keep flooding for the rest of the run while the valid events are stored.
	require.True(t, embeddedtest.Poll(floodDuration+60*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, g.Ready(ctx), "ingress stays ready")
		return e.count("orders") == uint64(floodValid) && time.Since(start) >= floodDuration
	}), "every valid event is stored: %d of %d (%d dropped by NATS as a slow consumer, %d shed, %d refusals dropped, %d refused messages sent)",
		e.count("orders"), floodValid, g.Stats().Dropped, g.Stats().Shed, g.Stats().RefusalsDropped, flooded.Load())
	close(stop)
	<-floodDone

	assert.Len(t, e.ids("orders"), floodValid, "each valid event once")
	st, err := e.js.Stream(ctx, dlq.RejectsStreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, info.State.Bytes, uint64(dlqBound), "the refusals stay within their bound")
	s := g.Stats()
	t.Logf("%d refused messages sent; %d refused, %d dead-lettering places full (dropped), %d shed, %d dropped by NATS (slow consumer), DLQ %d MiB, %d valid in %s",
		flooded.Load(), s.Rejected[ingress.CodeNotJSON], s.RefusalsDropped, s.Shed, s.Dropped, info.State.Bytes>>20, floodValid, time.Since(start).Round(time.Millisecond))
	assert.Positive(t, s.Rejected[ingress.CodeNotJSON])
}
