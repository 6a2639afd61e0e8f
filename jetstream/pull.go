package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// One partition of a subscription, from the first pull to the release.
//
// Lifecycle: Subscribe starts one goroutine per partition, partConsumer.run, owned by the
// subscription's WaitGroup. run looks the consumer up (recreating it if it was deleted),
// takes the partition over when asked to (SubscribePartition), opens a pull iterator (Messages) and
// hands it to consume, which delivers each message to handle (one at a time, or through the
// key workers of KeyConcurrency) until the iterator ends. A pull that ends for any reason but
// a stop is reopened after recovering the deliveries it may have lost (recoverDeliveries,
// pin.go), with a backoff when it failed. Stop closes the iterator (stopIter); run then
// returns and its deferred release hands the partition back (pin.go).
//
// Contexts: handlers run under the subscription's ctx, which is cancelled only once every
// partition has stopped, so a handler is never cancelled by a stop; Drain and Stop differ
// only in what consume does with messages fetched after the stop (handle or nak).

// partConsumer consumes one partition of one topic for a subscription.
type partConsumer struct {
	sub       *subscription
	topic     string
	stream    string
	partition int
	name      string
	gm        *groupMetrics
	log       *slog.Logger
	// span starts the deliveries' spans: nil when the Bus does not trace.
	span *processSpan
	// cons is the consumer handle pulls are made through. It is kept across pulls, because
	// it carries the pin the server gave this client: a new handle would have to wait for
	// the pin to time out. It is looked up again only after a failure.
	cons natsjs.Consumer
	win  window

	mu   sync.Mutex
	iter natsjs.MessagesContext

	// pinID is the pin the server gave this client, if it ever did, and lastDSeq the consumer
	// sequence of the last delivery received, or of the consumer's last delivery as the
	// server reported it after a take-over or a recovery (0 after a reset: the consumer's
	// sequence starts again at 1), or from its state when the partition started (baseline).
	// dseqKnown says whether lastDSeq is such a baseline. Only the partition's own goroutine
	// (run, consume and the deferred release) touches them.
	pinID     string
	lastDSeq  uint64
	dseqKnown bool
	// handledUpTo is the stream sequence of the last event handled and settled, when events
	// are handled one at a time (without KeyConcurrency): every earlier delivery of this
	// client is settled too.
	handledUpTo atomic.Uint64
	// naked is set when a nak was sent since the consumer's state was last awaited.
	naked atomic.Bool

	// held are an unordered pull's deliveries that nobody started when the subscription
	// stopped, given back once the pull no longer receives (unordered.go).
	heldMu sync.Mutex
	held   []*pulled

	// wakes counts the ordered pulls' Next calls woken by their wake (wake.go).
	wakes atomic.Uint64
}

// pullHeartbeat is how often the server tells a waiting pull that it is alive; nats.go takes
// the pull for lost after two intervals without a word, and the partition pulls again. A pull
// that met no one is found only so: one sent while an R3 consumer has no leader (just created,
// or electing) is answered "no responders", which nats.go's iterator takes as a pull still
// waiting and does not report. nats.go's default for a 30 s pull is 15 s: such a partition
// stood still for 30 s. The unordered pull's interval (5 s): within 10 s (about 12 s when the
// pull's wake called Next again meanwhile: each call starts nats.go's count again, wake.go).
const pullHeartbeat = unorderedHeartbeat

func (pc *partConsumer) stopIter() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.iter != nil {
		pc.iter.Drain()
	}
}

// iterClosed waits until a stopped or drained iterator has unsubscribed its pull's inbox:
// nats.go's Stop and Drain only signal its goroutine, which unsubscribes later. Until then
// the server, which pins the pull's requests to this client, may still deliver to them,
// and the client drops what arrives: a release or a recovery that looked at the consumer
// before would miss those deliveries, and they would come back only after the ack timeout,
// behind later events of their keys. It reports whether the inbox was unsubscribed within
// iterCloseWait (false: it gave up waiting).
//
// It asks the iterator again and again: for a Messages iterator, nats.go's Closed (v1.55.0)
// closes its channel only when it is called after the inbox is unsubscribed; nothing closes
// it at the unsubscribe (only Consume's closed handler does). Waiting on the channel of one
// call waited the whole bound after nearly every recovery and release, and a NATS node
// restart held a partition's events for 5 s or more.
func iterClosed(it natsjs.MessagesContext) bool {
	c, ok := it.(interface{ Closed() <-chan struct{} }) // nats.go's iterator has it
	if !ok {
		return true
	}
	t := time.NewTimer(iterCloseWait)
	defer t.Stop()
	for poll := 50 * time.Microsecond; ; poll = min(2*poll, 10*time.Millisecond) {
		select {
		case <-c.Closed():
			return true
		case <-t.C:
			return false
		case <-time.After(poll):
		}
	}
}

// waitIterClosed is iterClosed, which says when it gave up waiting: deliveries the server
// still sends to the pull then come back only after the ack timeout.
func (pc *partConsumer) waitIterClosed(it natsjs.MessagesContext, then string) {
	if !iterClosed(it) {
		pc.log.Warn("a stopped pull still receives after "+iterCloseWait.String()+": what the server sends to it comes back after the ack timeout", "then", then)
	}
}

// iterCloseWait bounds iterClosed: the unsubscribe follows Stop within microseconds, and
// Drain after a flush (a round trip to the server), unless the process is starved or its
// connection is gone.
const iterCloseWait = 5 * time.Second

func (pc *partConsumer) setIter(it natsjs.MessagesContext) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.sub.stopping() {
		it.Stop()
		return false
	}
	pc.iter = it
	return true
}

func (pc *partConsumer) run() {
	defer pc.sub.wg.Done()
	defer pc.release()
	b := pc.sub.bus
	takeOver := pc.sub.takeOver
	pc.baseline()
	var backoff retry.Backoff // every failure below is retried until the subscription stops
	wait := false
	for !pc.sub.stopping() {
		if b.nc.IsClosed() {
			pc.sub.fail(fmt.Errorf("%w: the NATS connection is closed", jetbus.ErrClosed))
			return
		}
		if wait && !backoff.Wait(pc.sub.stopCh) {
			return
		}
		wait = true
		if pc.cons == nil {
			cons, err := b.js.Consumer(pc.sub.ctx, pc.stream, pc.name)
			if errors.Is(err, natsjs.ErrConsumerNotFound) {
				// Deleted behind our back: recreate it where the subscription starts.
				cons, err = b.ensureConsumer(pc.sub.ctx, pc.topic, pc.sub.group, pc.partition, &pc.sub.opts, func() (uint64, error) {
					return b.resolve(pc.sub.ctx, pc.topic, pc.sub.opts.From)
				})
			}
			if err != nil {
				pc.log.Warn("consumer lookup failed", "err", err)
				continue
			}
			pc.cons = cons
			pc.reclaimPin()
			pc.baseline()
		}
		if pc.sub.opts.Unordered {
			// No pin, no takeover, no recovery by reset: see unordered.go.
			err := pc.pullUnordered()
			if pc.sub.stopping() {
				return
			}
			pc.log.Info("pull interrupted, resuming", "err", err)
			if errors.Is(err, errConsumerGone) {
				pc.cons = nil
			}
			continue
		}
		if takeOver {
			if err := pc.takeOver(); err != nil {
				pc.log.Warn("take over failed", "err", err)
				pc.cons = nil // the consumer may be gone (recreated above) or moved: look it up again
				continue
			}
			takeOver = false
		}
		it, err := pc.cons.Messages(
			natsjs.PullMaxMessages(pc.win.size),
			natsjs.PullPriorityGroup(jetbus.PriorityGroup),
			natsjs.PullHeartbeat(pullHeartbeat),
		)
		if err != nil {
			pc.log.Warn("pull failed", "err", err)
			pc.cons = nil
			continue
		}
		if b.nc.IsClosed() {
			// nats.go's iterator learns of a closed connection through a handler it installs
			// just after subscribing its inbox: a close in between leaves its Next waiting for
			// good (Stop and Drain do not end it either). Such a close is seen here instead: a
			// close after this check finds the handler installed.
			it.Stop()
			continue
		}
		if !pc.setIter(it) {
			return
		}
		err = pc.consume(it)
		if errors.Is(err, natsjs.ErrMsgIteratorClosed) && pc.sub.stopping() {
			return
		}
		if errors.Is(err, errResize) {
			// The pull was drained, nothing is lost: pull again with the new window.
			backoff.Reset()
			wait = false
			continue
		}
		it.Stop()
		pc.waitIterClosed(it, "resuming")
		if err != nil && !errors.Is(err, natsjs.ErrMsgIteratorClosed) && !errors.Is(err, errShrink) {
			pc.log.Info("pull interrupted, resuming", "err", err)
		}
		clean := err == nil || errors.Is(err, natsjs.ErrMsgIteratorClosed) || errors.Is(err, errDeliveryGap) || errors.Is(err, errShrink)
		if !clean {
			pc.cons = nil // the consumer may be gone or moved: look it up again
		}
		// Deliveries sent to the pull that just ended may have been lost on the way (a
		// reconnect, a consumer leader change): get them back now and in order rather than
		// after the ack timeout and behind later events of their keys.
		if !pc.recoverDeliveries() {
			clean = false // back off before the retry the next pull's gap will trigger
		}
		if clean {
			backoff.Reset()
			wait = false
		}
	}
}

// consume handles messages until the iterator ends, or until the window should change size:
// then it drains the iterator (handling what it had buffered) and returns errResize.
func (pc *partConsumer) consume(it natsjs.MessagesContext) error {
	handle := pc.handle
	if n := pc.sub.opts.KeyConcurrency; n > 1 {
		ws := pc.startWorkers(n)
		defer ws.stop()
		handle = ws.dispatch
	}
	wake, next := startWake(wakeAfter, func() { pc.wakes.Add(1) })
	defer wake.stop()
	resizing := false
	var t0 time.Time
	for {
		if pc.gm != nil && t0.IsZero() {
			t0 = time.Now()
		}
		msg, err := it.Next(next...)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				// Woken (wake.go): Next, called again, sends the pull request it owes.
				next = wake.renew()
				continue
			}
			if resizing && errors.Is(err, natsjs.ErrMsgIteratorClosed) && !pc.sub.stopping() {
				return errResize
			}
			return err
		}
		wake.delivered.Add(1)
		if wake.resting.Load() {
			wake.rearm()
		}
		if pc.gm != nil {
			pc.gm.poll(time.Since(t0))
			t0 = time.Time{}
		}
		if pin := msg.Headers().Get(pinHeader); pin != "" && pin != pc.pinID {
			pc.pinID = pin
		}
		// The metadata is read from the ack subject into the delivery's own allocation, not
		// with msg.Metadata (one more allocation per delivery, for the garbage collector that
		// the process shares with everything else).
		de := new(deliveryEvent)
		if err := parseAckReply(msg.Reply(), &de.meta); err != nil {
			pc.log.Error("message without metadata, terminated", "err", err)
			_ = msg.TermWithReason("jetbus: no metadata")
			continue
		}
		if err := pc.checkSequence(de.meta.Sequence.Consumer); err != nil {
			return err
		}
		if pc.sub.stopping() && !pc.sub.draining.Load() {
			// Fetched but not started: left pending, release returns it to the consumer with
			// a reset (a nak could reach the server after that reset and hit the next owner's
			// delivery of the same event).
			continue
		}
		now := handle(msg, de)
		if resizing {
			continue
		}
		switch pc.win.delivered(now) {
		case 1:
			resizing = true
			it.Drain()
		case -1:
			return errShrink
		}
	}
}

// baseline sets the consumer sequence the partition's first delivery is checked against,
// from the consumer's state when it was looked up, when nothing was pending then: a pull
// request the server fills before this client knows its pin (one it no longer reads, or
// another client's that took the pin first) then shows as a gap too. With deliveries pending
// (a previous holder's), there is no baseline: the first delivery is taken as it comes, and
// a take-over (SubscribePartition) is what returns them first.
func (pc *partConsumer) baseline() {
	if pc.pinID != "" || pc.dseqKnown || pc.sub.opts.Unordered || pc.cons == nil {
		return
	}
	if info := pc.cons.CachedInfo(); info != nil && info.NumAckPending == 0 {
		pc.lastDSeq, pc.dseqKnown = info.Delivered.Consumer, true
	}
}

// checkSequence takes the consumer sequence of the next delivery of a pinned pull. Every
// delivery of the consumer goes to its pinned client, one after the other, so the next one is
// the last one plus one. Any other sequence means deliveries went elsewhere: a pull request of
// this client the server still fills after the client stopped reading it (a reconnect, a node
// restart, the first delivery after a recovery's reset taken by such a request), or a reset or
// a leader change behind the client's back (the sequence went backwards). The delivery must
// then wait for those before it: the recovery returns everything unacknowledged, in order.
//
// A delivery without a pin (pinID still empty: the consumer's priority policy was changed
// outside jetbus) is not checked: without the pin, other clients may take deliveries, and a
// gap that a recovery cannot close (it needs the pin) would end every pull for good.
func (pc *partConsumer) checkSequence(dseq uint64) error {
	if pc.dseqKnown && pc.pinID != "" && dseq != pc.lastDSeq+1 {
		return fmt.Errorf("%w: consumer sequence %d after %d", errDeliveryGap, dseq, pc.lastDSeq)
	}
	pc.lastDSeq, pc.dseqKnown = dseq, true
	return nil
}
