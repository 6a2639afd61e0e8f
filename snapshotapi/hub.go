package snapshotapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// A hub is the one change stream of a collection in this process, shared by all its
// watchers: the server's cost per collection, not per client. It keeps the changes that
// carry a message in a ring: those of the last Config.WatchWindow, and at least the last
// hubRing whatever their age, within Config.WatchWindowBytes (past it the oldest go first).
// A watcher reads the ring from its own cursor (a drainer goroutine per watcher copies what
// it reads into the watcher's bounded buffer), so the hub never waits for a client. The
// window is what a drainer may be held up (the process short of CPU under a burst: a
// drainer of thousands on two cores waited seconds for its turn) without losing its place.
// A watcher whose start is before what the ring holds reads a change stream of its own
// from its start (catching up, at most Config.MaxCatchUps at once: catchups) and moves to
// the ring once the two meet.
//
// A hub starts when its collection gets its first watcher, at that watcher's start (or
// the position its snapshot begins from), and stops hubLinger after its last watcher left,
// so that clients reconnecting find its ring. It reopens its stream from where it was after
// a transient failure (MongoDB unavailable); a stream that cannot go on (its position
// fell out of the oplog, the collection was dropped) fails the hub and ends its watchers.

// hubRing is the fewest changes a hub keeps, whatever their age, within the byte bound (a
// variable for tests: a Server takes it when made).
var hubRing = 4096

// hubWindow, when not negative, replaces Config.WatchWindow (for tests: SetHubRing makes
// the ring keep exactly hubRing changes).
var hubWindow time.Duration = -1

// changeOverhead is what a change in the ring is counted for besides twice its document:
// the change, its position and key, and the id and framing of its rendering.
const changeOverhead = 320

// hubEpoch is the origin of the changes' reception times (monotonic).
var hubEpoch = time.Now()

// hubLinger is how long a hub without watchers keeps running.
const hubLinger = 30 * time.Second

type hubKey struct{ db, coll string }

// errShuttingDown ends streams when the server stops.
var errShuttingDown = fmt.Errorf("%w: the server is shutting down", jetbus.ErrUnavailable)

type hub struct {
	s      *Server
	key    hubKey
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once the stream opened, or failed to
	done   chan struct{} // closed when the hub failed or stopped (err says why)

	subs   int         // watchers holding the hub (Server.hubsMu)
	linger *time.Timer // stops the hub once idle (Server.hubsMu)

	mu       sync.Mutex
	ring     []*change // changes with a message, in order
	bytes    int64     // what the changes of the ring are counted for
	trimmed  int       // changes dropped from the front of ring's array since it was copied
	base     uint64    // the index of ring[0] among all changes ever in the ring
	floor    streamPos // every change with a message after floor is in the ring
	head     streamPos // the last change read
	recv     uint64    // changes read
	polls    uint64    // getMores the stream completed (each batch read to its end, or empty)
	dropRecv uint64    // recv of the newest change dropped from the ring
	dropped  bool
	wake     chan struct{} // closed when the ring or head moved
	err      error
}

// acquireHub returns the running hub of db.coll, holding it for a watcher (release gives it
// back). When none runs it starts one whose stream begins right after start: the error of
// opening it (an expired position) is returned then.
func (s *Server) acquireHub(ctx context.Context, start streamPos) (*hub, error) {
	key := hubKey{start.db, start.coll}
	for {
		s.hubsMu.Lock()
		if s.hubsStopped {
			s.hubsMu.Unlock()
			return nil, errShuttingDown
		}
		h := s.hubs[key]
		if h != nil {
			h.subs++
			if h.linger != nil {
				h.linger.Stop()
				h.linger = nil
			}
			s.hubsMu.Unlock()
			select {
			case <-h.ready:
			case <-ctx.Done():
				h.release()
				return nil, ctx.Err()
			}
			h.mu.Lock()
			err := h.err
			h.mu.Unlock()
			if err == nil {
				return h, nil
			}
			h.release() // it failed meanwhile: start another
			continue
		}
		hctx, cancel := context.WithCancel(s.hubsCtx)
		h = &hub{s: s, key: key, ctx: hctx, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{}),
			subs: 1, wake: make(chan struct{})}
		s.hubs[key] = h
		s.hubsRun.Add(1) // under hubsMu: stopHubs waits for every hub counted before it
		s.hubsMu.Unlock()
		src, err := s.openSource(ctx, start)
		if err != nil {
			h.fail(err)
			close(h.ready)
			h.release()
			s.hubsRun.Done()
			return nil, err
		}
		h.floor, h.head = src.head, src.head
		close(h.ready)
		go func() {
			defer s.hubsRun.Done()
			h.run(src)
		}()
		return h, nil
	}
}

// release gives back a watcher's hold; the last one leaves the hub lingering.
func (h *hub) release() {
	s := h.s
	s.hubsMu.Lock()
	defer s.hubsMu.Unlock()
	h.subs--
	if h.subs > 0 {
		return
	}
	select {
	case <-h.done: // failed: forget it now
		if s.hubs[h.key] == h {
			delete(s.hubs, h.key)
		}
		return
	default:
	}
	h.linger = time.AfterFunc(hubLinger, func() {
		s.hubsMu.Lock()
		defer s.hubsMu.Unlock()
		if h.subs == 0 && s.hubs[h.key] == h {
			delete(s.hubs, h.key)
			h.cancel()
		}
	})
}

// fail stops the hub for good with err; its watchers end.
func (h *hub) fail(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
		close(h.done)
		close(h.wake)
		h.wake = make(chan struct{})
	}
	h.mu.Unlock()
	h.cancel()
	s := h.s
	s.hubsMu.Lock()
	if s.hubs[h.key] == h {
		delete(s.hubs, h.key)
	}
	s.hubsMu.Unlock()
}

// run reads the stream until the hub stops.
func (h *hub) run(src *changeSource) {
	log := h.s.log.With("database", h.key.db, "collection", h.key.coll)
	defer func() {
		if src != nil {
			src.close(h.ctx)
		}
	}()
	for {
		ch, emit, err := src.next(h.ctx)
		if err != nil {
			if h.ctx.Err() != nil {
				h.fail(errShuttingDown)
				return
			}
			if expired(err) || errors.Is(err, errCollectionGone) {
				log.Warn("watch: the change stream cannot go on; its watchers end", "error", err)
				h.fail(err)
				return
			}
			log.Debug("watch: change stream failed; reopening where it was", "error", err)
			src.close(h.ctx)
			if src, err = h.reopen(src); err != nil {
				if h.ctx.Err() != nil {
					err = errShuttingDown
				}
				h.fail(err)
				return
			}
			continue
		}
		h.mu.Lock()
		if ch != nil {
			h.recv++
			ch.recv = h.recv
			h.head = ch.pos
			if emit {
				ch.at = time.Since(hubEpoch)
				ch.size = 2*int64(len(ch.doc)) + 2*int64(len(ch.key)) + changeOverhead
				h.ring = append(h.ring, ch)
				h.bytes += ch.size
			}
		}
		h.trim(time.Since(hubEpoch))
		if ch == nil || src.batchDone() {
			h.polls++
		}
		if ch == nil || src.batchDone() || h.recv%64 == 0 {
			// Watchers wake once per batch the stream returned (and every 64 changes of a
			// long one), not once per change.
			close(h.wake)
			h.wake = make(chan struct{})
		}
		h.mu.Unlock()
	}
}

// trim drops the changes the ring no longer keeps: the oldest past the byte bound (but the
// last one), and those older than the window beyond the hubRing last; h.mu held.
func (h *hub) trim(now time.Duration) {
	s := h.s
	for len(h.ring) > 1 {
		d := h.ring[0]
		if h.bytes <= s.ringBytes && (len(h.ring) <= s.hubRing || now-d.at < s.ringWindow) {
			break
		}
		h.ring = h.ring[1:]
		h.bytes -= d.size
		h.trimmed++
		h.base++
		h.floor, h.dropRecv, h.dropped = d.pos, d.recv, true
	}
	if h.trimmed >= 256 && h.trimmed >= len(h.ring)/4 {
		// The array still holds the changes dropped from its front: copy what is kept, so
		// that they go to the collector (readers keep the old array while they read it).
		h.ring = slices.Clone(h.ring)
		h.trimmed = 0
	}
}

// reopen opens the hub's stream again after a transient failure.
func (h *hub) reopen(old *changeSource) (*changeSource, error) {
	return reopenSource(h.ctx, h.s, old)
}

// reopenSource opens a stream again right after the last change old read, keeping what it
// knew of skipped updates; it retries while MongoDB is unavailable.
func reopenSource(ctx context.Context, s *Server, old *changeSource) (*changeSource, error) {
	var src *changeSource
	err := retry.Do(ctx, feedPolicy, func(ctx context.Context) error {
		n, err := s.openSource(ctx, old.head)
		if err != nil {
			return err // an expired position is not transient: Do gives up
		}
		src = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	src.dirty = old.dirty
	return src, nil
}

// seek returns the ring cursor of the first change after p, when the ring holds every
// change after p (or will: those not read yet).
func (h *hub) seek(p streamPos) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil || p.less(h.floor) {
		return 0, false
	}
	return h.after(p), true
}

// after is the cursor of the first change in the ring after p; h.mu held.
func (h *hub) after(p streamPos) uint64 {
	i := sort.Search(len(h.ring), func(i int) bool { return p.less(h.ring[i].pos) })
	return h.base + uint64(i)
}

// joinAt is seek for a watcher catching up that just read the change at p: the ring has
// read p too.
func (h *hub) joinAt(p streamPos) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil || p.less(h.floor) || h.head.less(p) {
		return 0, false
	}
	return h.after(p), true
}

// received is the count of changes the hub has read.
func (h *hub) received() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recv
}

// joinIdle is seek for a watcher catching up whose stream, at p, came back empty from a
// getMore that began when the hub had read r0 changes. That getMore returned every change
// committed before it began, so every change the hub had read before r0 is at or before
// p: if the ring dropped none read since, it holds every change after p.
func (h *hub) joinIdle(r0 uint64, p streamPos) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil || (h.dropped && h.dropRecv >= r0) {
		return 0, false
	}
	return h.after(p), true
}

// read returns the changes of the ring from cursor on, the position read up to, and a
// channel closed when there is more; lost when the ring dropped changes the cursor had not
// read; err when the hub failed.
func (h *hub) read(cursor uint64) (chs []*change, next uint64, head streamPos, wake <-chan struct{}, lost bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, cursor, h.head, h.wake, false, h.err
	}
	if cursor < h.base {
		return nil, cursor, h.head, h.wake, true, nil
	}
	end := h.base + uint64(len(h.ring))
	if cursor < end {
		i := int(cursor - h.base)
		chs = h.ring[i:len(h.ring):len(h.ring)]
	}
	return chs, end, h.head, h.wake, false, nil
}

// stopHubs ends every hub and refuses new ones, and returns once their goroutines ended:
// the server stops.
func (s *Server) stopHubs() {
	s.hubsMu.Lock()
	s.hubsStopped = true
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.hubsMu.Unlock()
	s.hubsCancel()
	for _, h := range hubs {
		h.fail(errShuttingDown)
	}
	s.hubsRun.Wait()
}

// passed waits until the hub has read every change committed before the call: two of its
// getMores completed, the second begun after the call (a getMore returns every change
// committed before it began). It returns the position read up to.
func (h *hub) passed(ctx context.Context) (streamPos, error) {
	h.mu.Lock()
	p0 := h.polls
	h.mu.Unlock()
	for {
		h.mu.Lock()
		polls, head, wake, err := h.polls, h.head, h.wake, h.err
		h.mu.Unlock()
		switch {
		case err != nil:
			return head, err
		case polls >= p0+2:
			return head, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return head, ctx.Err()
		}
	}
}

// drainGate, for tests (PauseDrainers), holds drainers before each read while it is
// closed; false when ctx ended meanwhile.
func (s *Server) drainGate(ctx context.Context) bool {
	g := s.drainPause.Load()
	if g == nil {
		return true
	}
	return waitGate(ctx, *g)
}

// switchGate is drainGate for a switch about to move its watch (PauseSwitches).
func (s *Server) switchGate(ctx context.Context) bool {
	g := s.switchPause.Load()
	if g == nil {
		return true
	}
	s.switchesHeld.Add(1)
	defer s.switchesHeld.Add(-1)
	return waitGate(ctx, *g)
}

// waitGate waits until g is closed (true) or ctx ends (false).
func waitGate(ctx context.Context, g chan struct{}) bool {
	select {
	case <-g:
		return true
	case <-ctx.Done():
		return false
	}
}
