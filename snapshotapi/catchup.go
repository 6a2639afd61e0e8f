package snapshotapi

import (
	"context"
	"sync"
	"sync/atomic"
)

// catchUps bounds the watches reading a change stream of their own at once
// (Config.MaxCatchUps): each such stream costs MongoDB a cursor that reads the oplog and
// looks every update up again (updateLookup), for one client, and holds one of the
// client's connections while it waits for changes. When an overflow burst sent thousands
// of watches back at once from positions older than what the hubs keep, each read its own
// (cmd/cmdtest's TestWatchLoad: the MongoDB backend spent up to 116 s of CPU on them, the
// connection pool ran dry and watch requests timed out into 503s).
//
// A watch beyond the bound waits its turn in order of arrival, streaming: it was answered
// 200 already, and the writer's keep-alive comments go on meanwhile. A 503 would close a
// browser's EventSource for good (it reconnects by itself only after a stream that was
// answered 200 ended), and waiting costs nothing but the watch's place among
// Config.MaxWatchers: no stream, no buffer. Like Kubernetes' API priority and fairness
// (requests queue for a seat) and PostgREST (requests queue for a pool connection), the
// bound makes requests wait rather than fail; unlike them the wait has no deadline, since
// every catch-up ends (it meets the hub's ring, its client leaves or stops reading past
// its write deadline, or its buffer fills while others wait: then it gets an overflow and
// queues again).
type catchUps struct {
	slots   chan struct{}
	waiters atomic.Int64
	mu      sync.Mutex
	arrived chan struct{} // closed when a watch begins to wait
}

func newCatchUps(n int) *catchUps {
	return &catchUps{slots: make(chan struct{}, n), arrived: make(chan struct{})}
}

// tryAcquire takes a place if one is free and nobody waits for one.
func (c *catchUps) tryAcquire() bool {
	if c.waiters.Load() > 0 {
		return false
	}
	select {
	case c.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquire waits for a place; false when ctx ended first.
func (c *catchUps) acquire(ctx context.Context, m *metrics) bool {
	if c.tryAcquire() {
		return true
	}
	c.waiters.Add(1)
	m.catchUpWaiting(1)
	c.mu.Lock()
	close(c.arrived)
	c.arrived = make(chan struct{})
	c.mu.Unlock()
	defer func() {
		c.waiters.Add(-1)
		m.catchUpWaiting(-1)
	}()
	select {
	case c.slots <- struct{}{}: // goroutines blocked sending are served in order
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives a place back.
func (c *catchUps) release() { <-c.slots }

// arrivals returns a channel closed when a watch begins to wait for a place: read it
// before waiting, so that an arrival after that call is not missed.
func (c *catchUps) arrivals() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.arrived
}

// waiting is the count of watches waiting for a place.
func (c *catchUps) waiting() int64 { return c.waiters.Load() }
