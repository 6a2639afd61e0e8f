package snapshotapi_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// TestWatchCheck checks the guarantees on many clients at once, over HTTP: while keys
// change (each version written twice, as redeliveries do), and a rebuild's new generation
// takes over midway, clients watch from scratch, from a list's position and from other
// clients' ids, some reading slowly enough to overflow; each reconnects with its last id
// whenever its stream ends. For every client and key the versions received strictly
// increase, each was written, and the client ends with every key's final state.
func TestWatchCheck(t *testing.T) {
	t.Cleanup(snapshotapi.SetHubRing(32))
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.WatchBuffer = 8
		c.KeepAlive = 100 * time.Millisecond
		c.RequestTimeout = 30 * time.Second
	}))
	const keys, versions, clients = 40, 30, 8
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	final := map[string]int64{}
	written := map[string]map[int64]bool{}
	writes := map[string][]string{} // per key its versions in order, "d" marking deletes
	write := func(coll, key string, v int64, deleted bool) {
		if deleted {
			a.tombstone(coll, key, v)
		} else {
			a.set(coll, key, v, bson.D{{Key: "status", Value: "paid"}, {Key: "n", Value: v}})
		}
	}
	apply := func(key string, v int64, deleted bool, switched bool) {
		mu.Lock()
		if written[key] == nil {
			written[key] = map[int64]bool{}
		}
		written[key][v] = true
		writes[key] = append(writes[key], fmt.Sprintf("%d%s", v, map[bool]string{true: "d"}[deleted]))
		if deleted {
			final[key] = -v
		} else {
			final[key] = v
		}
		mu.Unlock()
		for range 2 { // a redelivery writes it again: the version guard makes it a no-op
			if !switched {
				write("orders", key, v, deleted)
			}
			write("orders-g2", key, v, deleted)
		}
		if switched {
			write("orders", key, v, deleted) // an old projector, lagging
		}
	}
	apply("k00", 1, false, false)
	listPos := a.get("/v1/views/orders").Header.Get("Jetbus-Position")
	require.NotEmpty(t, listPos)

	type client struct {
		last  map[string]int64
		state map[string]int64
		id    string
		// what happened, for a failure to tell: the connections (how each began and
		// ended) and per key the messages received, each with its connection's number
		conns []string
		hist  map[string][]string
	}
	var ids sync.Map              // some ids clients received, for others to start from
	resume := make(chan struct{}) // client 4 reads nothing until two thirds of the versions are written

	var wg sync.WaitGroup
	done := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(done) }) }
	// However the test ends, its clients stop before its cleanups run: a client reconnects
	// whenever its stream ends, so closing streams or the server under clients that go on
	// would never end (each stream's cleanup makes the client open another; the HTTP
	// server's Close waits for the streams).
	defer func() {
		stop()
		wg.Wait()
	}()
	results := make([]*client, clients)
	for i := range clients {
		c := &client{last: map[string]int64{}, state: map[string]int64{}, hist: map[string][]string{}}
		results[i] = c
		wg.Go(func() {
			headers := []string{}
			path := "/v1/views/orders?watch=true"
			switch i % 3 {
			case 1:
				path += "&since=" + listPos
				mu.Lock()
				c.state["k00"], c.last["k00"] = 1, 1 // what the list showed
				mu.Unlock()
			case 2:
				var v any
				embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool { // another client got going
					var ok bool
					v, ok = ids.Load(i - 2)
					return ok
				})
				if v != nil {
					// another client's id: take over its state too
					other := v.(*client)
					mu.Lock()
					for k, x := range other.state {
						c.state[k] = x
					}
					for k, x := range other.last {
						c.last[k] = x
					}
					c.id = other.id
					mu.Unlock()
				}
			}
			slow := i%4 == 3
			received := 0
			for {
				if c.id != "" {
					headers = []string{"Last-Event-ID", c.id}
				}
				var s *stream
				conn := len(c.conns)
				mu.Lock()
				c.conns = append(c.conns, fmt.Sprintf("%d: from %q", conn, c.id))
				mu.Unlock()
				if i == 4 && received == 0 {
					// It reads nothing until resume: its sockets fill, the server's writes wait.
					_, body := a.rawConn(path, headers...)
					s = startPaused(t, body)
					go func() {
						select {
						case <-resume:
						case <-done:
						}
						s.resume()
					}()
				} else {
					var r response
					if s, r = a.openWatch(path, headers...); s == nil {
						t.Errorf("client %d: %d %s", i, r.StatusCode, r.body)
						return
					}
				}
				for ended := false; !ended; {
					var e sseEvent
					select {
					case e0, ok := <-s.events:
						if !ok {
							ended = true
							mu.Lock()
							c.conns[conn] += " ended by the server"
							mu.Unlock()
							continue
						}
						e = e0
					case <-done:
						s.close()
						return
					}
					if e.hasID {
						c.id = e.id
					}
					switch e.event {
					case "upsert", "delete":
						p := e.payload(t)
						mu.Lock()
						if v := p.version(); v >= 0 {
							if v <= c.last[p.Key] {
								t.Errorf("client %d: key %s went from %d to %d", i, p.Key, c.last[p.Key], v)
							}
							if !written[p.Key][v] {
								t.Errorf("client %d: key %s: version %d was never written", i, p.Key, v)
							}
							c.last[p.Key] = v
						}
						c.hist[p.Key] = append(c.hist[p.Key], fmt.Sprintf("%d:%s@%d", conn, e.event, p.version()))
						if e.event == "upsert" {
							c.state[p.Key] = p.version()
						} else {
							c.state[p.Key] = 0 // deleted
						}
						mu.Unlock()
						received++
						if slow {
							time.Sleep(5 * time.Millisecond) // a slow reader
						}
					case "overflow", "disconnect":
						ended = true
						mu.Lock()
						c.conns[conn] += " ended by " + e.event + " " + e.data
						mu.Unlock()
					default: // synced, switched
						mu.Lock()
						c.conns[conn] += fmt.Sprintf(" %s after %d", e.event, received)
						mu.Unlock()
					}
					if i%3 == 0 && c.id != "" {
						snap := &client{state: map[string]int64{}, last: map[string]int64{}, id: c.id}
						mu.Lock()
						for k, x := range c.state {
							snap.state[k] = x
						}
						for k, x := range c.last {
							snap.last[k] = x
						}
						mu.Unlock()
						ids.Store(i, snap)
					}
				}
				s.close()
			}
		})
	}

	switchAt := versions / 2
	for v := int64(2); v <= versions; v++ {
		if int(v) == switchAt {
			a.switchTo("orders-g2", 2)
		}
		if int(v) == 2*versions/3 {
			close(resume)
		}
		for _, k := range rng.Perm(keys) {
			apply(fmt.Sprintf("k%02d", k), v, rng.IntN(10) == 0, int(v) >= switchAt)
		}
	}
	// differ lists the keys whose state c does not have.
	differ := func(c *client) []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for k, v := range final {
			got, ok := c.state[k]
			if v < 0 { // deleted: never received, or a delete
				if ok && got != 0 {
					out = append(out, k)
				}
				continue
			}
			if got != v {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}
	lastWrite := time.Now()
	for i, c := range results {
		if !embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool { return len(differ(c)) == 0 }) {
			d := differ(c)
			if len(d) == 0 {
				continue // it got there right after the deadline
			}
			stop()
			wg.Wait() // then c.id is the client's last
			k := d[0]
			t.Fatalf("client %d does not end with the final state within 10s: %d keys differ (%v); %s was written %v, the client received %v (connection:event@version) on its connections:\n%s\nwatch ends %v, events %v",
				i, len(d), d, k, writes[k], c.hist[k], strings.Join(c.conns, "\n"),
				metricSum(t, a, "snapshotapi_watch_ends_total"), metricSum(t, a, "snapshotapi_watch_events_total"))
		}
	}
	t.Logf("every client has the final state %s after the last write", time.Since(lastWrite).Round(time.Millisecond))
	stop()
	wg.Wait()
	ends := metricSum(t, a, "snapshotapi_watch_ends_total")
	require.GreaterOrEqual(t, ends, 1.0, "client 4 overflowed at least")
	t.Logf("overflows and other ends: %v; events: %v", ends, metricSum(t, a, "snapshotapi_watch_events_total"))
}
