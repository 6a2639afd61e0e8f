package snapshotapi_test

import (
	"fmt"
	"math/rand/v2"
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
	}
	var ids sync.Map              // some ids clients received, for others to start from
	resume := make(chan struct{}) // client 4 reads nothing until two thirds of the versions are written

	var wg sync.WaitGroup
	done := make(chan struct{})
	results := make([]*client, clients)
	for i := range clients {
		c := &client{last: map[string]int64{}, state: map[string]int64{}}
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
	want := func(c *client) bool {
		mu.Lock()
		defer mu.Unlock()
		for k, v := range final {
			got, ok := c.state[k]
			if v < 0 { // deleted: never received, or a delete
				if ok && got != 0 {
					return false
				}
				continue
			}
			if got != v {
				return false
			}
		}
		return true
	}
	for i, c := range results {
		eventually(t, func() bool { return want(c) }, fmt.Sprintf("client %d ends with the final state", i))
	}
	close(done)
	wg.Wait()
	ends := metricSum(t, a, "snapshotapi_watch_ends_total")
	require.GreaterOrEqual(t, ends, 1.0, "client 4 overflowed at least")
	t.Logf("overflows and other ends: %v; events: %v", ends, metricSum(t, a, "snapshotapi_watch_events_total"))
}
