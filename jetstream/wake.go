package jetstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// nats.go's Messages iterator (v1.55.0) sends its next pull request from Next, when what it
// still expects falls below half the batch, but only while no earlier request is on its way
// (jetstream/pull.go: checkPending skips while fetchInProgress is set; pullMessages clears it
// only after the request was published). When the goroutine sending a request is descheduled
// between publishing it and clearing the flag, and Next meanwhile consumes everything that
// request brought (a backlog, a small batch), every check is skipped: nothing more is expected,
// no request is at the server, and Next waits until its heartbeat monitor gives up (two
// heartbeats: 10 s), after which the partition pulls again from a fresh lookup. nats.go's
// iterator alone, reading a backlog of 60,000 events with batches of 2 to 64 on an idle
// machine, met it in two reads of three; the Bus, in none of 72 reads on an idle machine,
// and in its first read with `make test` running beside it (TestBacklogReadsDoNotStall).
//
// Any return into Next sends the missing request (its loop checks again first), so a wake
// guards each ordered pull: a timer checks, every wakeAfter[0] while deliveries come, that
// one came; when none did (the last delivery was 0.25 to 0.5 s ago), the Next waiting then is
// ended through its context and called again. In one quiet spell it is woken after each of
// wakeAfter's intervals (a wake can come while the request is still on its way, and find
// nothing to send); after the last, the timer rests until the next delivery, so an idle
// partition costs three wakes per idle spell and nothing after. A handler slower than a tick
// makes the next Next return at once, one call more.
//
// nats.go's heartbeat stays the backstop for the rest (a request that met no one), later by
// the spell: each call into Next starts its two-heartbeat count again, so such a pull is
// given up about 12 s after its last delivery instead of 10 s.

// wakeAfter are the quiet times after which a waiting Next is woken, one after the other, in
// one quiet spell (1.75 to 2 s in all). The first is also how often a pull that receives
// deliveries is checked.
var wakeAfter = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// pullWake wakes one iterator's Next when deliveries stop: see above.
type pullWake struct {
	// delivered counts deliveries; the consume loop adds to it, the timer reads it.
	delivered atomic.Uint64

	after   []time.Duration // wakeAfter
	onWake  func()
	mu      sync.Mutex
	ctx     context.Context    // the current Next context
	cancel  context.CancelFunc // ends it
	seen    uint64             // delivered at the last check
	wakes   int                // in this quiet spell
	stopped bool
	timer   *time.Timer

	// resting is set when the timer stopped after len(after) wakes; the consume loop rearms
	// it at its next delivery.
	resting atomic.Bool
}

// startWake arms a wake for one consume loop, and returns what its first Next is called
// with. Stop it when the loop ends.
func startWake(after []time.Duration, onWake func()) (*pullWake, []natsjs.NextOpt) {
	w := &pullWake{after: after, onWake: onWake}
	opts := w.renew()
	w.mu.Lock()
	w.timer = time.AfterFunc(after[0], w.check)
	w.mu.Unlock()
	return w, opts
}

// renew returns what Next is called with after it was woken: a new context the wake may
// end. The slice is kept by the caller and passed as is, so Next's variadic argument
// allocates nothing per call.
func (w *pullWake) renew() []natsjs.NextOpt {
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	w.ctx, w.cancel = ctx, cancel
	return []natsjs.NextOpt{natsjs.NextContext(ctx)}
}

func (w *pullWake) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if n := w.delivered.Load(); n != w.seen {
		w.seen, w.wakes = n, 0
		w.timer.Reset(w.after[0])
		return
	}
	w.cancel()
	w.onWake()
	if w.wakes++; w.wakes < len(w.after) {
		w.timer.Reset(w.after[w.wakes])
	} else {
		w.resting.Store(true)
	}
}

// rearm restarts a resting timer; consume calls it on a delivery that finds it resting
// (whether or not the wakes ended a Next: they may all have come while a slow handler ran).
func (w *pullWake) rearm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.resting.Load() && !w.stopped {
		w.resting.Store(false)
		w.seen, w.wakes = w.delivered.Load(), 0
		w.timer.Reset(w.after[0])
	}
}

func (w *pullWake) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	w.cancel()
}
