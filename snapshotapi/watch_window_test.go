package snapshotapi_test

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/snapshotapi"
)

// receiveKeys reads n upserts from s, k00 to k<n-1> in order, and returns the id of each.
func receiveKeys(t *testing.T, s *stream, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for k := range n {
		e := s.next()
		require.Equal(t, "upsert", e.event, "%s", e.data)
		require.Equal(t, fmt.Sprintf("k%02d", k), e.payload(t).Key)
		ids = append(ids, e.id)
	}
	return ids
}

// TestWatchWindowKeepsAHeldUpDrainer: the hub keeps the changes of Config.WatchWindow, not
// only its last few, so that a watch whose drainer is held up (the process short of CPU
// under a burst) goes on from where it was when it runs again: no overflow, no change stream
// of its own. A client resuming from a position the window still holds reads it too.
func TestWatchWindowKeepsAHeldUpDrainer(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(5))
	t.Cleanup(snapshotapi.SetHubWindow(time.Minute))
	a := newAPI(t, false)
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "synced", s.next().event)

	resume := a.srv.PauseDrainers()
	for k := range 40 {
		a.set("orders", fmt.Sprintf("k%02d", k), 1, nil)
	}
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 40 }, "the hub read every change")
	kept, _ := a.srv.HubKept(a.db.Name(), "orders")
	assert.Equal(t, 40, kept, "the window keeps more than the 5 last changes")
	resume()
	ids := receiveKeys(t, s, 40)
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_ends_total"), "no overflow")
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_catchups_total"), "no catch-up")
	assert.Equal(t, 1, a.streamsOn("orders"), "the hub's stream only")

	// A client cut off (or an overflow resumed) from a position the window holds reads it.
	s.close()
	r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", ids[9])
	for k := 10; k < 40; k++ {
		require.Equal(t, fmt.Sprintf("k%02d", k), r.next().payload(t).Key)
	}
	assert.Equal(t, 1, a.streamsOn("orders"), "resumed from the hub's ring")
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_catchups_total"))
}

// TestWatchWindowBytes: what the hub keeps is bounded by Config.WatchWindowBytes, whatever
// the window: past it the oldest changes go first. A watch that falls behind what is kept
// meanwhile still receives every change.
func TestWatchWindowBytes(t *testing.T) {
	const budget = 100 << 10
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.WatchWindowBytes = budget }))
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "synced", s.next().event)
	resume := a.srv.PauseDrainers()
	for k := range 20 { // each about 16 KiB: counted twice, 20 of them are 650 KiB
		a.set("orders", fmt.Sprintf("k%02d", k), 1, bson.D{pad})
	}
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 20 }, "the hub read every change")
	n, bytes := a.srv.HubKept(a.db.Name(), "orders")
	assert.LessOrEqual(t, bytes, int64(budget))
	assert.Positive(t, n)
	assert.Less(t, n, 20)
	resume()
	receiveKeys(t, s, 20)
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_ends_total"), "no overflow")
}

// TestWatchDrainerBehindCatchesUp: a watch whose drainer, not its client, fell behind what
// the hub keeps (its buffer had room) is not cut off: it goes on from where it was through
// a change stream of its own, then moves back to the hub's, and its client receives every
// change once, in order.
func TestWatchDrainerBehindCatchesUp(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(5))
	a := newAPI(t, false)
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "paid"}})
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "upsert", s.next().event)
	require.Equal(t, "synced", s.next().event)
	f := a.watch("/v1/views/orders?watch=true&status=eq.paid")
	require.Equal(t, "upsert", f.next().event)
	require.Equal(t, "synced", f.next().event)

	resume := a.srv.PauseDrainers()
	for k := range 40 {
		a.set("orders", fmt.Sprintf("k%02d", k), 1, bson.D{{Key: "status", Value: "paid"}})
	}
	a.set("orders", "a", 2, bson.D{{Key: "status", Value: "open"}}) // leaves the filter
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 41 }, "the hub read every change")
	resume()
	for _, w := range []*stream{s, f} {
		receiveKeys(t, w, 40)
	}
	e := s.next()
	assert.Equal(t, "upsert", e.event)
	assert.EqualValues(t, 2, e.payload(t).version())
	e = f.next()
	assert.Equal(t, "delete", e.event, "the filtered watch learns that a left")
	assert.Equal(t, "a", e.payload(t).Key)

	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_ends_total"), "no overflow")
	assert.Equal(t, 2.0, metricSum(t, a, "snapshotapi_watch_catchups_total"))
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_streams") == 1 }, "both moved back to the hub's stream")
	assert.Equal(t, 3, a.streamsOn("orders"), "the hub's, and one for each while catching up")
	a.set("orders", "z", 1, bson.D{{Key: "status", Value: "paid"}})
	assert.Equal(t, "z", s.next().payload(t).Key)
	assert.Equal(t, "z", f.next().payload(t).Key)
}

// TestWatchCatchUpsBounded: at most Config.MaxCatchUps watches read change streams of their
// own at once; another one is answered 200 and waits its turn, streaming keep-alive
// comments, then catches up as well.
func TestWatchCatchUpsBounded(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(5))
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.MaxCatchUps = 1
		c.KeepAlive = 50 * time.Millisecond
	}))
	a.set("orders", "a", 1, nil)
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "upsert", s.next().event)
	synced := s.next()
	require.Equal(t, "synced", synced.event)
	s.close() // its hub lingers, reading on
	for k := range 30 {
		a.set("orders", fmt.Sprintf("k%02d", k), 1, nil)
	}
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 30 }, "the hub read on past what it keeps")

	resume := a.srv.PauseDrainers()
	first := a.watch("/v1/views/orders?watch=true&since=" + synced.id)
	second := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", synced.id)
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_catchups_waiting") == 1 }, "the second waits")
	b := second.block(time.Second)
	assert.Equal(t, []string{"keep-alive"}, b.comments, "a waiting watch streams keep-alive comments")
	assert.Empty(t, b.event)
	assert.Equal(t, 2, a.streamsOn("orders"), "the hub's, and the first watch's")

	resume()
	receiveKeys(t, first, 30)
	receiveKeys(t, second, 30)
	eventually(t, func() bool {
		return metricSum(t, a, "snapshotapi_watch_catchups_waiting") == 0 && metricSum(t, a, "snapshotapi_watch_streams") == 1
	}, "both caught up, one after the other, and moved to the hub's stream")
	assert.Equal(t, 3, a.streamsOn("orders"))
	assert.Equal(t, 2.0, metricSum(t, a, "snapshotapi_watch_catchups_total"))
}

// behindTheHub starts an API with one place among the catch-ups, watch buffers of 2 keys and
// hubs keeping 5 changes, and returns the synced event of a watch of orders the hub no longer
// reaches: 30 changes after it of about 16 KiB each (more than the sockets hold), read by the
// hub. also (when not nil) is called with each key written.
func behindTheHub(t *testing.T, also func(a *api, key string)) (*api, sseEvent) {
	t.Helper()
	t.Cleanup(snapshotapi.SetHubRing(5))
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.MaxCatchUps = 1
		c.WatchBuffer = 2
		c.RequestTimeout = time.Minute
	}))
	if also == nil {
		also = func(*api, string) {}
	}
	a.set("orders", "a", 1, nil)
	also(a, "a")
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "upsert", s.next().event)
	synced := s.next()
	require.Equal(t, "synced", synced.event)
	s.close() // its hub lingers, reading on
	for k := range 30 {
		a.set("orders", fmt.Sprintf("k%02d", k), 1, bson.D{pad})
		also(a, fmt.Sprintf("k%02d", k))
	}
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 30 }, "the hub read on past what it keeps")
	return a, synced
}

// TestWatchSlowCatchUpGivesWay: a watch catching up whose client reads nothing holds its
// place among the catch-ups only until another watch waits for one: its buffer full, it is
// cut off with an overflow event, and the waiting watch catches up.
func TestWatchSlowCatchUpGivesWay(t *testing.T) {
	a, synced := behindTheHub(t, nil)

	conn, body := a.rawConn("/v1/views/orders?watch=true&since=" + synced.id)
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(16<<10))
	slow := startPaused(t, body)
	waitBlocked(t, a)
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_ends_total"), "nobody waits: the slow catch-up keeps its place")

	next := a.watch("/v1/views/orders?watch=true&since=" + synced.id)
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_ends_total") == 1 }, "the slow one is cut off")
	receiveKeys(t, next, 30)

	slow.resume()
	last := ""
	for {
		e := slow.next()
		if e.event == "overflow" {
			assert.Contains(t, e.data, `"code":"overflow"`)
			break
		}
		k := e.payload(t).Key
		require.Greater(t, k, last, "in order")
		last = k
	}
}

// TestWatchSwitchCatchUpBounded: a watch following a rebuild's switch, when the new
// generation's hub no longer holds the switch's time, reads that generation on a change
// stream of its own: it takes a place among the catch-ups for it like any other, so that
// Config.MaxCatchUps bounds those streams too (here the slow catch-up holding the only place
// is cut off to make room), and it goes on with the new generation's changes.
func TestWatchSwitchCatchUpBounded(t *testing.T) {
	a, synced := behindTheHub(t, func(a *api, key string) { a.set("orders-g2", key, 1, nil) }) // the rebuild, caught up
	follower := a.watch("/v1/views/orders?watch=true")
	for e := follower.next(); e.event != "synced"; e = follower.next() {
		require.Equal(t, "upsert", e.event)
	}

	// The only place among the catch-ups, held by a client that reads nothing.
	conn, body := a.rawConn("/v1/views/orders?watch=true&since=" + synced.id)
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(16<<10))
	startPaused(t, body)
	waitBlocked(t, a)

	held, resume := a.srv.PauseSwitches()
	a.switchTo("orders-g2", 2)
	eventually(t, func() bool { return held() == 1 }, "the follower read what differs and is about to move")
	// Meanwhile the new generation's hub reads on past the switch's time.
	fresh := a.watch("/v1/views/orders?watch=true")
	for e := fresh.next(); e.event != "synced"; e = fresh.next() {
	}
	fresh.close() // its hub lingers, reading on
	for k := range 10 {
		a.set("orders-g2", fmt.Sprintf("n%02d", k), 1, nil)
	}
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders-g2") == 10 }, "the new hub read on")
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_ends_total"))

	resume()
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_ends_total") == 1 },
		"the slow catch-up is cut off: the follower waits for its place")
	for e := follower.block(10 * time.Second); !slices.Contains(e.comments, "generation switched"); e = follower.block(10 * time.Second) {
	}
	for k := range 10 {
		e := follower.next()
		require.Equal(t, "upsert", e.event, "%s", e.data)
		require.Equal(t, fmt.Sprintf("n%02d", k), e.payload(t).Key)
	}
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_watch_catchups_total", "switched", "orders"))
	assert.Zero(t, metricSum(t, a, "snapshotapi_watch_catchups_waiting"))
}

// TestWatchJoinKeepsWhatItsStreamSkipped: a watch catching up whose own change stream
// skipped an update of a key (the document had moved on when the stream looked it up) and
// that then moves to the hub's ring reads the key's next change as one whose changed fields
// are unknown, as the stream would have. Here the key is deleted, then deleted again: the
// second tombstone changes only its version, and the client, which never had the first,
// still learns that the key is deleted.
func TestWatchJoinKeepsWhatItsStreamSkipped(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(1))
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.MaxCatchUps = 1 }))
	a.set("orders", "k", 1, bson.D{{Key: "status", Value: "paid"}})
	s := a.watch("/v1/views/orders?watch=true") // the hub runs from here (and lingers)
	require.Equal(t, "upsert", s.next().event)
	synced := s.next()
	require.Equal(t, "synced", synced.event)
	// Gone before the changes below: with a ring of one change, this watch could need a
	// catch-up of its own and take the only place (its drainer attaches after its synced
	// event, and may fall behind the ring).
	s.close()
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watchers") == 0 }, "the first watch ended")
	require.Zero(t, metricSum(t, a, "snapshotapi_watch_catchups_waiting"))

	a.set("orders", "f", 1, nil) // dropped from the ring: a client resuming at synced catches up
	a.tombstone("orders", "k", 2)
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 2 }, "the hub read the first tombstone")
	resume := a.srv.PauseDrainers()
	// One client takes the only place among the catch-ups; the other waits for it.
	first := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", synced.id)
	r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", synced.id)
	// Now the key moves on: the waiting client's stream, opened once the first client
	// leaves, finds it at 3 when it reads the first tombstone, and skips that.
	a.tombstone("orders", "k", 3)
	eventually(t, func() bool { return a.srv.HubReceived(a.db.Name(), "orders") == 3 }, "the hub read the second tombstone")
	first.close()
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_catchups_total") == 2 }, "the second client's catch-up began")
	resume()

	e := r.next()
	require.Equal(t, "upsert", e.event)
	require.Equal(t, "f", e.payload(t).Key)
	e = r.next()
	require.Equal(t, "delete", e.event, "%s", e.data)
	assert.Equal(t, "k", e.payload(t).Key)
	assert.EqualValues(t, 3, e.payload(t).version())
}
