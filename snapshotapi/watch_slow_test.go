package snapshotapi_test

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// pad is a field that makes each message about 16 KiB, so that a client that stops
// reading fills the sockets' buffers quickly.
var pad = bson.E{Key: "pad", Value: strings.Repeat("x", 16<<10)}

// startPaused builds a stream over a body nobody reads yet.
func startPaused(t *testing.T, body *bufio.Reader) *stream {
	s := &stream{t: t, events: make(chan sseEvent, 100000), done: make(chan error, 1), cancel: func() {}}
	s.resp = nil
	return s.withBody(body)
}

func (s *stream) withBody(body io.Reader) *stream {
	s.body = body
	return s
}

// resume starts reading a paused stream.
func (s *stream) resume() { go s.read(s.body) }

// waitBlocked waits until the server's writes to a client that reads nothing wait: the
// count of events sent stops growing.
func waitBlocked(t *testing.T, a *api) {
	t.Helper()
	last, still := -1.0, 0
	eventually(t, func() bool {
		n := metricSum(t, a, "snapshotapi_watch_events_total")
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
		return still >= 20
	}, "the server's writes wait")
}

// TestWatchSlowClientCoalesces: a client that stops reading while keys change many times
// is sent, once it reads again, only the latest version of a key it has not received yet:
// per key the versions it receives only increase, and it ends with every key's last
// version, having received fewer messages than there were changes.
func TestWatchSlowClientCoalesces(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.RequestTimeout = time.Minute }))
	_, body := a.rawConn("/v1/views/orders?watch=true")
	s := startPaused(t, body)
	const keys, versions = 20, 30
	for v := int64(1); v <= versions; v++ {
		for k := range keys {
			a.set("orders", fmt.Sprintf("k%02d", k), v, bson.D{pad})
		}
		if v == 3 {
			t.Log("blocking", time.Now())
			waitBlocked(t, a)
			t.Log("blocked", time.Now())
		}
	}
	t.Log("written", time.Now())
	s.resume()
	require.Equal(t, "synced", s.next().event)
	last := map[string]int64{}
	received := 0
	for len(last) < keys || !allAt(last, versions) {
		e := s.next()
		require.Equal(t, "upsert", e.event)
		p := e.payload(t)
		require.Greater(t, p.version(), last[p.Key], "key %s: version %d after %d", p.Key, p.version(), last[p.Key])
		last[p.Key] = p.version()
		received++
	}
	assert.Less(t, received, keys*versions, "a slow client is sent fewer messages than there were changes")
	t.Logf("%d changes, %d messages", keys*versions, received)
}

func allAt(m map[string]int64, v int64) bool {
	for _, x := range m {
		if x != v {
			return false
		}
	}
	return true
}

// TestWatchOverflow: a client whose buffer is full of keys waiting, and which falls behind
// what the hub keeps, gets an overflow event and is disconnected; resuming with
// Last-Event-ID it gets every key's latest version, never one older than it had.
func TestWatchOverflow(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(20))
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.RequestTimeout = time.Minute
		c.WatchBuffer = 4
	}))
	_, body := a.rawConn("/v1/views/orders?watch=true")
	s := startPaused(t, body)
	for v := int64(1); v <= 200; v++ { // one key: it never takes more than one place
		a.set("orders", "fill", v, bson.D{pad})
	}
	waitBlocked(t, a)
	for k := range 40 {
		a.set("orders", fmt.Sprintf("k%02d", k), 1, bson.D{pad})
	}
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_ends_total") == 1 }, "overflow counted")
	s.resume()
	require.Equal(t, "synced", s.next().event)
	last := map[string]int64{}
	for {
		e := s.next()
		if e.event == "overflow" {
			assert.Contains(t, e.data, `"code":"overflow"`)
			break
		}
		p := e.payload(t)
		require.Greater(t, p.version(), last[p.Key], "%s %s", e.event, e.data)
		last[p.Key] = p.version()
	}
	require.True(t, s.ended(5*time.Second), "disconnected")
	require.NotEmpty(t, s.lastID)

	// Resume as a client does, again after each overflow (the hub may still be reading the
	// changes, and keeps only 20).
	id := s.lastID
	for len(last) < 41 || last["fill"] != 200 {
		r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", id)
		for len(last) < 41 || last["fill"] != 200 {
			e := r.next()
			if e.event == "overflow" {
				break
			}
			p := e.payload(t)
			require.Greater(t, p.version(), last[p.Key], "key %s: %s %s", p.Key, e.event, e.data)
			last[p.Key] = p.version()
		}
		id = r.lastID
		r.close()
	}
}

// TestWatchCatchesUpThenShares: a watch from a position older than what the hub keeps
// reads a change stream of its own from there, gets every change in order, and moves to
// the hub's stream once it met it — while changes go by, or when its stream comes back
// empty — so that one stream per collection remains.
func TestWatchCatchesUpThenShares(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(5))
	a := newAPI(t, false)
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

	b := a.watch("/v1/views/orders?watch=true&since=" + synced.id)
	for k := range 30 {
		e := b.next()
		require.Equal(t, fmt.Sprintf("k%02d", k), e.payload(t).Key)
	}
	eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_streams") == 1 }, "the watch moved to the hub's stream")
	assert.Equal(t, 2, a.streamsOn("orders"), "the hub's, and one while catching up")
	a.set("orders", "z", 1, nil)
	assert.Equal(t, "z", b.next().payload(t).Key)

	t.Run("an idle stream", func(t *testing.T) {
		a := newAPI(t, false)
		a.set("orders", "a", 1, nil)
		p1 := a.get("/v1/views/orders").Header.Get("Jetbus-Position")
		a.set("other", "x", 1, nil)
		// A later position, from another replica: its snapshot reads after the write above.
		other := newAPIAt(t, embeddedtest.MongoURI(t), a.db, false)
		o := other.watch("/v1/views/orders?watch=true")
		o.next()
		p2 := o.next()
		require.Equal(t, "synced", p2.event)

		first := a.watch("/v1/views/orders?watch=true&since=" + p2.id) // the hub starts at p2
		older := a.watch("/v1/views/orders?watch=true&since=" + p1)    // before it: catching up, with nothing to read
		eventually(t, func() bool { return a.streamsOn("orders") == 2 }, "the older watch catches up on its own")
		eventually(t, func() bool { return metricSum(t, a, "snapshotapi_watch_streams") == 1 }, "then moves to the hub's stream")
		a.set("orders", "b", 1, nil)
		assert.Equal(t, "b", first.next().payload(t).Key)
		assert.Equal(t, "b", older.next().payload(t).Key)
	})
}

// TestWatchDoesNotWaitForTheLiveCollection: each watch looks up its view's live generation
// about once a second, to follow a rebuild; a lookup that MongoDB is slow to answer does not
// hold the watches back. (Each one waited for it: no change went out meanwhile, and once a
// lookup took longer than the hub's ring lasts, every watch of the process fell behind the
// ring at once and got an overflow — 1,875 of 2,000 in one run of cmd/cmdtest's
// TestWatchLoad.)
func TestWatchDoesNotWaitForTheLiveCollection(t *testing.T) {
	a := newAPI(t, false)
	a.set("orders", "a", 1, nil)
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "upsert", s.next().event)
	require.Equal(t, "synced", s.next().event)

	// The next find of the API is the lookup, once the last one is a second old.
	finds := a.findCount()
	embeddedtest.InjectMongoFault(t, a.db.Client(), embeddedtest.MongoFault{Commands: []string{"find"}, Times: 1,
		Block: 5 * time.Second, AppName: apiAppName})
	eventually(t, func() bool { return a.findCount() > finds }, "the watch looks the live collection up")
	for k := range 100 {
		a.set("orders", fmt.Sprintf("k%03d", k), 1, nil)
	}
	for k := range 100 {
		e := s.block(3 * time.Second)
		for e.event == "" { // a keep-alive
			e = s.block(3 * time.Second)
		}
		require.Equal(t, "upsert", e.event, "%s", e.data)
		require.Equal(t, fmt.Sprintf("k%03d", k), e.payload(t).Key)
	}
}
