package jetstream

import (
	"errors"
	"sync/atomic"
	"time"
)

// errResize ends a pull whose window grows: the pull was drained, nothing is lost.
var errResize = errors.New("jetbus: pull window resized")

// errShrink ends a pull whose window must shrink at once: the handler slowed down so much
// that the events buffered would not be handled within the ack timeout. The pull is stopped
// and its buffered events are returned to the consumer (recoverDeliveries).
var errShrink = errors.New("jetbus: pull window shrunk")

// window sizes a partition's pull: how many events the client asks the server for ahead of
// the handler. A large window keeps the pipeline full (a pull consumer otherwise waits a round
// trip per batch); but every buffered event's ack timer is already running, so the window
// must be handled well within AckTimeout. The window starts at BatchSize and, after each
// window's worth of events, is resized to what the handler's measured speed allows: the
// events buffered take at most a quarter of AckTimeout to handle, between 1 and MaxInFlight
// (which the server enforces anyway). It changes only by a factor of two or more, so a pull
// is restarted rarely: a few times while a subscription starts, and when the handler's speed
// changes. A window that takes longer than that quarter to handle is checked at once, not
// after all its events: a handler that slowed down shrinks it before its buffered events
// time out.
type window struct {
	size     int           // events per pull now
	max      int           // MaxInFlight
	budget   time.Duration // AckTimeout/4: what the buffered events may take to handle
	parallel int           // handlers running at once (KeyConcurrency)
	count    int           // events delivered since the last sizing (the pull's goroutine)
	since    time.Time     // when the window was last sized (the pull's goroutine)
	ewma     atomic.Int64  // handler time per event in ns, exponentially averaged
}

func newWindow(batch, maxInFlight, keyConcurrency int, ackTimeout time.Duration) window {
	return window{
		size:     min(batch, maxInFlight),
		max:      maxInFlight,
		budget:   ackTimeout / 4,
		parallel: max(keyConcurrency, 1),
	}
}

// observe records one handler run.
func (w *window) observe(d time.Duration) {
	old := w.ewma.Load()
	if old == 0 {
		w.ewma.Store(int64(d) + 1)
		return
	}
	w.ewma.Store(old + (int64(d)-old)/8)
}

// delivered counts one event delivered at now and reports how the window changes: not at
// all (0), grows (1) or shrinks (-1); size is then the new size. It is sized after a window's
// worth of events, or earlier when the events since the last sizing took longer than the
// budget, and changes by a factor of two or more.
func (w *window) delivered(now time.Time) int {
	w.count++
	if w.since.IsZero() {
		w.since = now
	}
	if w.count < w.size && now.Sub(w.since) < w.budget {
		return 0
	}
	w.count, w.since = 0, now
	t := w.target()
	switch {
	case t >= 2*w.size:
		w.size = t
		return 1
	case 2*t <= w.size:
		w.size = t
		return -1
	}
	return 0
}

// target is the window the handler's speed allows, rounded down to a power of two.
func (w *window) target() int {
	per := time.Duration(w.ewma.Load())
	if per <= 0 {
		return w.size
	}
	n := int(min(int64(w.budget)*int64(w.parallel)/int64(per), int64(w.max)))
	if n < 1 {
		return 1
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	if p*2 > w.max && n == w.max {
		return w.max // the whole of MaxInFlight, not the power of two below it
	}
	return p
}
