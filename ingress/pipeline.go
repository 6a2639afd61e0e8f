package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/retry"
)

// stages are the goroutines behind handle: the acknowledgement waiter, the retrier, the
// dead-letter writers, the prober and the monitor. Each stage ends when its queue is closed
// and empty; finish closes the queues in pipeline order.
type stages struct {
	waiter, retrier, rejecters, background sync.WaitGroup
}

func (g *Ingress) startStages() *stages {
	s := &stages{}
	s.waiter.Go(g.waitAcks)
	s.retrier.Go(g.retryLoop)
	for range rejecters {
		s.rejecters.Go(g.rejectLoop)
	}
	s.background.Go(g.probe)
	s.background.Go(g.monitor)
	return s
}

// finish ends the stages once handle queues nothing more (the gate is closed): every
// message still held is stored, answered, dead-lettered, or abandoned at the drain deadline.
func (g *Ingress) finish(s *stages) {
	g.closeGate()
	s.waiter.Wait()
	close(g.retries)
	s.retrier.Wait()
	close(g.rejects)
	s.rejecters.Wait()
	g.cancelWork()
	s.background.Wait()
}

// waitAcks settles the published messages in the order they were published: JetStream
// acknowledges a connection's publishes in about that order, so one goroutine keeps up.
func (g *Ingress) waitAcks() {
	dl := deadlines{parent: g.work, d: g.cfg.AckTimeout}
	defer dl.stop()
	for it := range g.acks {
		e, err := it.fut.Wait(dl.at(it.start))
		if err != nil {
			g.failed(it, err, true)
			continue
		}
		g.brk.close("an acknowledgement")
		g.stored(it, e, it.fut.Duplicate(), false)
	}
}

// retryLoop publishes again, one at a time and in order, the fire-and-forget messages
// JetStream did not store, each with the event ID and time of its first attempt so that one
// that was stored after all is not stored twice. It waits while the breaker is open and
// gives up only at the drain deadline.
func (g *Ingress) retryLoop() {
	for it := range g.retries {
		g.retryOne(it)
	}
}

func (g *Ingress) retryOne(it *item) {
	opts := it.opts
	if it.event != nil {
		opts = append(opts[:len(opts):len(opts)], jetbus.WithID(it.event.ID), jetbus.WithTS(it.event.TS))
	}
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		if !g.brk.wait(g.work.Done()) {
			g.abandon(it, errors.New("JetStream unavailable until the drain deadline"))
			return
		}
		ctx, cancel := context.WithTimeout(g.work, g.cfg.AckTimeout)
		fut, err := g.pub.PublishAsync(traced(ctx, it), it.topic, json.RawMessage(it.data), opts...)
		async := false
		if err == nil {
			if it.event == nil {
				it.event = fut.Event()
				opts = append(opts[:len(opts):len(opts)], jetbus.WithID(it.event.ID), jetbus.WithTS(it.event.TS))
			}
			_, err = fut.Wait(ctx)
			async = true
		}
		cancel()
		if err == nil {
			g.brk.close("a retry")
			g.stored(it, fut.Event(), fut.Duplicate(), true)
			return
		}
		r := refusalOf(err)
		if r.code != CodeUnavailable && !(async && errors.Is(err, jetbus.ErrTopicNotFound)) {
			g.refused(it, r)
			return
		}
		g.brk.open(it.topic, err)
		if !bo.Wait(g.work.Done()) {
			g.abandon(it, err)
			return
		}
	}
}

// rejectLoop writes dead letters for refused fire-and-forget messages, retrying until the DLQ
// takes each or the drain deadline passes.
func (g *Ingress) rejectLoop() {
	for it := range g.rejects {
		g.deadLetter(it)
	}
}

func (g *Ingress) deadLetter(it *item) {
	r := g.fit(dlq.Rejected{
		Topic: it.topic, Source: it.subject, By: "ingress", ID: it.clientID,
		Header: it.header, Data: it.data, Reason: dlq.ReasonIngress, Err: it.ref, Unlisted: g.topics[it.topic] == nil,
	})
	bo := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		_, err := g.dl.Reject(traced(g.work, it), r)
		if err == nil {
			g.releaseItem(it)
			endSpan(it, nil, false, it.ref, nil)
			return
		}
		if attempt == 1 {
			g.log.Warn("ingress: dead letter not stored yet; retrying", "subject", it.subject, "code", string(it.ref.code), "error", err)
		}
		if g.work.Err() != nil || !bo.Wait(g.work.Done()) {
			g.abandon(it, err)
			return
		}
	}
}

// dlqOverhead is room for the headers the DLQ adds to a dead letter (x-dlq-error is at most
// 1 KiB), besides the message's subject and ID, which it repeats (x-dlq-original-subject,
// x-dlq-original-id): see overhead.
const dlqOverhead = 2048

// overhead is the room the DLQ's headers take in r's dead letter.
func overhead(r dlq.Rejected) int { return dlqOverhead + len(r.Source) + len(r.ID) }

// bodyCutter is a DeadLetters that cuts the bodies of refusals itself, keeping the whole
// body's size and hash (*dlq.Queue with dlq.rejects.max_body).
type bodyCutter interface{ MaxRejectBody() int }

// fit trims a dead letter that would not fit the server's max payload (a message near the
// limit, plus the DLQ's headers) or JetStream's limit on headers: it drops the client's
// headers when they alone are too large, keeps the first bytes of a body that does not fit
// (with the whole body's size and SHA-256, so that the letter is marked truncated and cannot
// be replayed), and says so in the error. A body the DLQ cuts to fit itself is left whole,
// so that the DLQ records the whole body's size and hash.
func (g *Ingress) fit(r dlq.Rejected) dlq.Rejected {
	limit := int(g.conn.MaxPayload())
	if limit <= 0 { // not connected yet: the server's default
		limit = 1 << 20
	}
	over := overhead(r)
	room := limit - over
	hs := headerSize(r.Header)
	data := len(r.Data)
	if c, ok := g.dl.(bodyCutter); ok && c.MaxRejectBody() > 0 {
		data = min(data, c.MaxRejectBody())
	}
	if data+hs <= room && hs+over <= jsMaxHeader {
		return r
	}
	note := ""
	if hs > room/2 || hs+over > jsMaxHeader {
		r.Header, hs = nil, 0
		note = "the client's headers are dropped"
	}
	if keep := max(0, room-hs); data > keep {
		if note != "" {
			note += "; "
		}
		note += fmt.Sprintf("the body is cut to its first %d of %d bytes", keep, len(r.Data))
		// The letter says so as the DLQ's own cut does: the whole body's size and hash, and
		// it cannot be replayed.
		r.BodySize, r.BodySHA256 = len(r.Data), bodyHash(r.Data)
		r.Data = r.Data[:keep]
	}
	r.Err = fmt.Errorf("%w (in this dead letter %s)", r.Err, note)
	return r
}

func bodyHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// abandon gives up a fire-and-forget message at the drain deadline: neither stored nor
// dead-lettered, it is counted and logged.
func (g *Ingress) abandon(it *item, err error) {
	g.stats.abandoned.Add(1)
	g.m.abandoned.Inc()
	id := it.clientID
	if it.event != nil {
		id = it.event.ID
	}
	g.log.Error("ingress stopped before a fire-and-forget message was stored or dead-lettered: it is lost",
		"subject", it.subject, "id", id, "error", err)
	g.releaseItem(it)
	endSpan(it, nil, false, nil, err)
}

// probe asks, while the breaker is open, for the stream of the topic that failed last; an
// answer (even "not found": JetStream answers) closes the breaker.
func (g *Ingress) probe() {
	for {
		select {
		case <-g.brk.kick:
		case <-g.work.Done():
			return
		}
		bo := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
		for g.brk.isDown() {
			if !bo.Wait(g.work.Done()) {
				return
			}
			ctx, cancel := context.WithTimeout(g.work, 2*time.Second)
			_, err := g.pub.JetStream().Stream(ctx, jetbus.StreamName(g.brk.probeTopic()))
			cancel()
			if err == nil || errors.Is(err, natsjs.ErrStreamNotFound) {
				g.brk.close("the prober")
			} else {
				g.log.Debug("ingress: JetStream still unavailable", "error", err)
			}
		}
	}
}

// monitorEvery is how often the monitor counts dropped messages; backPressureLogEvery how
// often at most it logs that back-pressure is on.
const (
	monitorEvery         = time.Second
	backPressureLogEvery = 10 * time.Second
)

// monitor counts the messages NATS dropped and logs back-pressure, at most every
// backPressureLogEvery.
func (g *Ingress) monitor() {
	t := time.NewTicker(monitorEvery)
	defer t.Stop()
	var lastLog time.Time
	for {
		select {
		case <-t.C:
		case <-g.work.Done():
			g.countDropped()
			return
		}
		g.countDropped()
		since := g.stallSince.Load()
		n := g.stallN.Load()
		if (n == 0 && since == 0) || time.Since(lastLog) < backPressureLogEvery {
			continue
		}
		g.stallN.Add(-n)
		d := time.Duration(g.stallTime.Swap(0))
		attrs := []any{"pauses_ended", n, "paused_for", d.Round(time.Millisecond).String(),
			"max_in_flight", g.cfg.MaxInFlight, "jetstream_unavailable", g.brk.isDown()}
		if since != 0 {
			attrs = append(attrs, "paused_now_for", time.Since(time.Unix(0, since)).Round(time.Millisecond).String())
		}
		lastLog = time.Now()
		g.log.Warn("ingress back-pressure: max_in_flight messages held, reading paused until JetStream acknowledges", attrs...)
	}
}

func (g *Ingress) countDropped() {
	sub := g.sub.Load()
	if sub == nil {
		return
	}
	n, err := sub.Dropped()
	if err != nil {
		return
	}
	if prev := g.stats.dropped.Load(); uint64(n) > prev {
		g.stats.dropped.Store(uint64(n))
		g.m.dropped.Add(float64(uint64(n) - prev))
	}
}

// logDue reports whether a rate-limited log line may be written now, at most every
// backPressureLogEvery; last holds the Unix nanoseconds of the previous one.
func logDue(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(backPressureLogEvery) && last.CompareAndSwap(prev, now)
}

// logDroppedRefusal logs a refusal not dead-lettered, at most every backPressureLogEvery.
func (g *Ingress) logDroppedRefusal(it *item) {
	if logDue(&g.refuseLog) {
		g.log.Warn("ingress: refused messages arrive faster than the DLQ takes them: dropping them (counted in ingress_refusals_dropped_total); valid messages are not slowed",
			"subject", it.subject, "code", string(it.ref.code))
	}
}
