package changefeed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetbus/jetbus"
)

// ackTimeout bounds the wait for one publish's acknowledgement. The Bus's async publishes
// carry no timeout of their own: an acknowledgement lost with a server is waited for this
// long, then the publish counts as failed and the runner starts again from its position
// (the publish, if it was stored after all, is then dropped as a duplicate).
const ackTimeout = 10 * time.Second

// entry is one step of a runner, in the order of the changes (or documents): a publish
// awaiting its acknowledgement, or a step that needs none (a dead-lettered change, a
// heartbeat, a publish already acknowledged in recovery).
type entry struct {
	fut jetbus.PublishFuture
	// step is what the entry moves the position to once it and every entry before it are
	// done; it is applied by the window's owner (onDone), in order.
	step step
}

// step is an entry's effect on a runner's position. Exactly one runner goroutine (the
// window's acker) applies steps.
type step struct {
	kind     stepKind
	token    []byte // the resume token after this entry (stream)
	clusterT uint64 // cluster time of the change, T<<32|I (0: unknown)
	lastID   []byte // copy: the {"_id": …} of the document (BSON)
	ns       string // copy: the collection of the document; drainer: the outbox document's _id
	key      string
	rejected bool // dead-lettered instead of published
	dup      bool // the server had the event already (recovery)
}

type stepKind uint8

const (
	stepChange    stepKind = iota // a change published (or dead-lettered)
	stepHeartbeat                 // a quiet stream's post-batch resume token
	stepCopied                    // a copied document published (or dead-lettered)
	stepNamespace                 // a copy finished one collection
)

// errWindowFailed is returned by push after a publish of the window failed: the runner stops
// reading and starts again from its acknowledged position.
var errWindowFailed = errors.New("changefeed: a publish failed")

// window keeps the publishes of a runner in flight, at most size at once, and hands each
// entry to onDone in order once it and every entry before it are done: the position onDone
// keeps is therefore always that of the highest entry whose publish and every publish before
// it were acknowledged. The first failed publish (or onDone error) stops it: onDone sees
// nothing after it.
type window struct {
	ch     chan *entry
	onDone func(*entry) error
	done   chan struct{}

	mu       sync.Mutex
	failedCh chan struct{}
	failErr  error
	pushed   atomic.Int64 // entries pushed
	settled  atomic.Int64 // entries handed to onDone
}

func newWindow(size int, onDone func(*entry) error) *window {
	w := &window{ch: make(chan *entry, size), onDone: onDone, done: make(chan struct{}), failedCh: make(chan struct{})}
	go w.ack()
	return w
}

// push adds e, blocking while the window is full. It returns errWindowFailed once a publish
// failed, or ctx's error.
func (w *window) push(ctx context.Context, e *entry) error {
	select {
	case <-w.failedCh:
		return errWindowFailed
	default:
	}
	select {
	case w.ch <- e:
		w.pushed.Add(1)
		return nil
	case <-w.failedCh:
		return errWindowFailed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failed is closed when a publish failed.
func (w *window) failed() <-chan struct{} { return w.failedCh }

// close stops the window: no more pushes. It waits until every entry is settled (handed to
// onDone, or — after a failure — acknowledged or given up on, so no publish of this window
// is still on its way when the runner starts again) and returns how many entries were
// pushed after the last one settled in order, and the first failure.
func (w *window) close() (unsettled int, err error) {
	close(w.ch)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.pushed.Load() - w.settled.Load()), w.failErr
}

func (w *window) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failErr == nil {
		w.failErr = err
		close(w.failedCh)
	}
}

func (w *window) ack() {
	defer close(w.done)
	var giveUp time.Time // after a failure: when to stop waiting for the rest
	for e := range w.ch {
		if w.isFailed() {
			if e.fut != nil {
				if giveUp.IsZero() {
					giveUp = time.Now().Add(ackTimeout)
				}
				ctx, cancel := context.WithDeadline(context.Background(), giveUp)
				_, _ = e.fut.Wait(ctx)
				cancel()
			}
			continue
		}
		if e.fut != nil {
			ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
			_, err := e.fut.Wait(ctx)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("changefeed: no acknowledgement within %s", ackTimeout)
				}
				w.fail(err)
				continue
			}
			e.step.dup = e.fut.Duplicate()
		}
		if err := w.onDone(e); err != nil {
			w.fail(err)
			continue
		}
		w.settled.Add(1)
	}
}

func (w *window) isFailed() bool {
	select {
	case <-w.failedCh:
		return true
	default:
		return false
	}
}
