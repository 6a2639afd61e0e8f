package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

// An unordered group's pull (jetbus.Unordered). Its consumers have no pin, so every member
// of the group pulls every partition and the server spreads the deliveries over their
// requests. The Bus makes those pull requests itself, with core NATS, rather than through
// nats.go's Messages iterator, for two reasons:
//
//   - Stopping. A member that stops must not lose the deliveries its requests still have
//     coming: an unordered group cannot reset its consumer to get them back (that would
//     redeliver what the other members hold), so without care they come back only after the
//     ack timeout. The iterator unsubscribes at once, and the server drops what it had
//     assigned to the request and not sent yet. The puller keeps count of what its requests asked for
//     and, on stop, stops asking and stays subscribed until that has arrived (or the
//     consumer has nothing left to give), then unsubscribes and gives back what it did not
//     start. A nak sent while still subscribed could bring the event straight back to this
//     member, so the naks wait for the unsubscribe.
//   - Cost. The iterator arms a timer and wraps each message in two allocations; here a
//     delivery costs one (pulled, with its metadata parsed in place and room for the Delivery
//     and Event that handle makes of it), which also spares the garbage collector. And the
//     acks of events handled on the pull's goroutine are sent together (ackBatch): on an
//     idle machine each ack sent alone costs a write on each side, and wakes the client's
//     flusher and the server's reader.
//
// What it speaks of the JetStream pull protocol is what nats.go's iterator speaks: requests
// {"batch","expires","idle_heartbeat"} to $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
// with an inbox of its own as reply subject, asking again for up to the window once fewer
// than half of it are still to come; status messages 100 (idle heartbeat), 404/408 and 409
// "Batch Completed" (the request ended with Nats-Pending-Messages undelivered), 409
// "Leadership Change" (every request is gone), 409 "Consumer Deleted" (run looks the
// consumer up again); anything else ends the pull, and run starts a new one after a
// backoff. A reconnect, or two heartbeat intervals without any message while requests are
// outstanding, count every request as gone.

const (
	// unorderedExpires is how long one pull request waits at the server at most.
	unorderedExpires = 30 * time.Second
	// unorderedHeartbeat is how often the server tells a waiting request is alive.
	unorderedHeartbeat = 5 * time.Second
	// stopQuiet: a stopping pull that received nothing for this long asks the server whether
	// its consumer has anything left to deliver; if not, no request will be filled. It asks
	// again after twice as long each time, up to maxStopQuiet.
	stopQuiet, maxStopQuiet = 20 * time.Millisecond, 500 * time.Millisecond
	// stopLimit bounds how long a stopping pull waits for what its requests asked for.
	stopLimit = 5 * time.Second
	// nextSubjectPrefix is the pull API of the Bus's JetStream context (Open: default prefix).
	nextSubjectPrefix = "$JS.API.CONSUMER.MSG.NEXT."
	// ackBatch bounds the acks a pull holds back to send together, and ackBatchAge how long
	// the first of them waits: they are sent when there are ackBatch of them, or ackBatchAge
	// after the first, whatever the handler is doing then (a timer sends them), and when the
	// pull ends. (Not when the inbox is empty: on an idle machine the pull outpaces the
	// connection's reader and finds it empty every few events.)
	ackBatch, ackBatchAge = 64, time.Millisecond
)

// errConsumerGone ends a pull whose consumer was deleted: run looks it up again and
// recreates it.
var errConsumerGone = errors.New("jetbus: consumer deleted")

// puller is one partition consumer's pull for an unordered subscription. Only the
// partition's goroutine uses it, but for the acks it holds back (acksMu: its timer sends
// them too).
type puller struct {
	pc      *partConsumer
	nc      *nats.Conn
	subject string // the consumer's next-message API subject
	inbox   string
	msgs    chan *nats.Msg
	sub     *nats.Subscription
	status  chan nats.Status
	// pending counts the deliveries requested and not yet taken from msgs nor released by a
	// status message.
	pending int
	// seen counts the messages taken (deliveries and status messages); seenAtCheck is its
	// value at the last heartbeat check.
	seen, seenAtCheck uint64
	// ahead holds deliveries taken out of msgs before their turn (kept alive when the window
	// shrinks): they are handled first.
	ahead []*pulled
	// failed is a status message's error met while keeping deliveries alive: it ends the
	// pull once they are handled.
	failed error
	// keptAt is when keepAlive last restarted the buffered deliveries' ack timeout.
	keptAt time.Time
	req    []byte
	// acks are the reply subjects of deliveries acknowledged and not sent yet (pulled.Ack of
	// a delivery handled on this goroutine); ackTimer sends them ackBatchAge after the first.
	acksMu   sync.Mutex
	acks     []string
	ackTimer *time.Timer
}

// pullUnordered pulls the partition until the subscription stops (nil) or the pull fails.
func (pc *partConsumer) pullUnordered() error {
	b := pc.sub.bus
	p := &puller{
		pc:      pc,
		nc:      b.nc,
		subject: nextSubjectPrefix + pc.stream + "." + pc.name,
		inbox:   b.nc.NewInbox(),
		// The pull asks for at most its window, MaxInFlight at most, and the server sends no
		// more unacknowledged events than the consumer's MaxInFlight: a channel that holds
		// them all drops none (nats.go would report a slow consumer); the rest is room for
		// status messages.
		msgs: make(chan *nats.Msg, pc.sub.opts.MaxInFlight+64),
	}
	// Registered before subscribing: a reconnect between the two still resets the requests.
	p.status = b.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	sub, err := b.nc.ChanSubscribe(p.inbox, p.msgs)
	if err != nil {
		b.nc.RemoveStatusListener(p.status)
		return err
	}
	p.sub = sub
	handle := pc.handle
	// Deferred in this order: the key workers finish before the pull unsubscribes and gives
	// back what nobody started.
	defer p.close()
	if n := pc.sub.opts.KeyConcurrency; n > 1 {
		ws := pc.startWorkers(n)
		defer ws.stop()
		handle = ws.dispatch
	}
	check := time.NewTimer(2 * unorderedHeartbeat)
	defer check.Stop()
	for {
		if pc.sub.stopping() {
			return p.finish(handle)
		}
		if err := p.request(); err != nil {
			return err
		}
		var m *nats.Msg
		if len(p.ahead) > 0 {
			pm := p.ahead[0]
			p.ahead[0] = nil
			p.ahead = p.ahead[1:]
			p.deliver(pm, handle)
			continue
		}
		if p.failed != nil {
			return p.failed
		}
		select {
		case m = <-p.msgs:
		default:
			var t0 time.Time
			if pc.gm != nil {
				t0 = time.Now()
			}
			select {
			case m = <-p.msgs:
				if pc.gm != nil {
					pc.gm.poll(time.Since(t0))
				}
			case <-pc.sub.stopCh:
				continue
			case st := <-p.status:
				if st == nats.CLOSED {
					return fmt.Errorf("%w: the NATS connection is closed", jetbus.ErrClosed)
				}
				p.pending = 0 // reconnected: the requests made before are gone
				continue
			case <-check.C:
				if p.pending > 0 && p.seen == p.seenAtCheck {
					// Not even a heartbeat for two intervals: the requests are gone.
					p.pending = 0
				}
				p.seenAtCheck = p.seen
				check.Reset(2 * unorderedHeartbeat)
				continue
			}
		}
		pm, err := p.take(m)
		if err != nil {
			return err
		}
		if pm != nil {
			p.deliver(pm, handle)
		}
	}
}

// request asks for more deliveries when fewer than half the window are still to come.
func (p *puller) request() error {
	size := p.pc.win.size
	if p.pending >= (size+1)/2 {
		return nil
	}
	n := size - p.pending
	p.req = fmt.Appendf(p.req[:0], `{"batch":%d,"expires":%d,"idle_heartbeat":%d}`,
		n, unorderedExpires.Nanoseconds(), unorderedHeartbeat.Nanoseconds())
	if err := p.nc.PublishRequest(p.subject, p.inbox, p.req); err != nil {
		return fmt.Errorf("jetbus: pull request: %w", err)
	}
	p.pending += n
	return nil
}

// take accounts for one message from the inbox and returns it as a delivery, or nil for a
// status message (or a message that is no delivery).
func (p *puller) take(m *nats.Msg) (*pulled, error) {
	p.seen++
	if len(m.Data) == 0 && len(m.Header) > 0 {
		if code := m.Header.Get("Status"); code != "" {
			return nil, p.statusMsg(code, m.Header)
		}
	}
	p.pending = max(p.pending-1, 0)
	pm := &pulled{nc: p.nc, msg: m}
	if p.pc.sub.opts.KeyConcurrency <= 1 && !p.pc.sub.opts.ManualAck {
		// Handled and acknowledged on this goroutine: the ack may wait for others.
		pm.batch = p
	}
	if err := parseAckReply(m.Reply, &pm.de.meta); err != nil {
		p.pc.log.Error("message without metadata, terminated", "err", err)
		_ = pm.TermWithReason("jetbus: no metadata")
		return nil, nil
	}
	return pm, nil
}

// deliver hands a delivery to the handler and sizes the window.
func (p *puller) deliver(pm *pulled, handle func(natsjs.Msg, *deliveryEvent) time.Time) {
	pc := p.pc
	now := handle(pm, &pm.de)
	switch {
	case pc.win.delivered(now) < 0:
		// The handler slowed down: the next requests ask for less, and what is buffered
		// already has its ack timeout restarted, so that it is not delivered again while it
		// waits here.
		p.keepAlive(now)
	case len(p.ahead)+len(p.msgs) > pc.win.size && now.Sub(p.keptAt) >= pc.win.budget:
		// Still more buffered than the window the handler's speed allows (what it gets
		// through in a quarter of the ack timeout, the budget): restart their ack timeout
		// again, each budget, until they are handled. (Within the window, as while the
		// handler keeps up, nothing needs it.)
		p.keepAlive(now)
	}
}

// holdAck keeps the ack of a delivery handled on this goroutine for sendAcks.
func (p *puller) holdAck(reply string) {
	p.acksMu.Lock()
	defer p.acksMu.Unlock()
	p.acks = append(p.acks, reply)
	switch {
	case len(p.acks) >= ackBatch:
		p.sendAcksLocked()
	case len(p.acks) == 1:
		if p.ackTimer == nil {
			p.ackTimer = time.AfterFunc(ackBatchAge, p.sendAcks)
		} else {
			p.ackTimer.Reset(ackBatchAge)
		}
	}
}

// sendAcks sends the acks held back, one after the other: the connection's flusher then
// writes them in one go.
func (p *puller) sendAcks() {
	p.acksMu.Lock()
	defer p.acksMu.Unlock()
	p.sendAcksLocked()
}

func (p *puller) sendAcksLocked() {
	if len(p.acks) == 0 {
		return
	}
	if p.ackTimer != nil {
		p.ackTimer.Stop()
	}
	for i, reply := range p.acks {
		if err := p.nc.Publish(reply, ackAck); err != nil {
			p.pc.log.Warn("acks not sent; the server will redeliver after the ack timeout", "acks", len(p.acks)-i, "err", err)
			break
		}
	}
	clear(p.acks)
	p.acks = p.acks[:0]
}

// keepAlive restarts the ack timeout of every delivery buffered in the inbox (taking them
// out, ahead of later ones) and of those taken out before.
func (p *puller) keepAlive(now time.Time) {
	p.keptAt = now
	for _, pm := range p.ahead {
		_ = pm.InProgress()
	}
	for {
		select {
		case m := <-p.msgs:
			pm, err := p.take(m)
			if err != nil {
				p.failed = cmp.Or(p.failed, err)
				continue
			}
			if pm != nil {
				_ = pm.InProgress()
				p.ahead = append(p.ahead, pm)
			}
		default:
			return
		}
	}
}

// statusMsg applies a status message to the count of deliveries to come; an error ends the
// pull.
func (p *puller) statusMsg(code string, h nats.Header) error {
	desc := strings.ToLower(h.Get("Description"))
	switch {
	case code == "100": // idle heartbeat
	case code == "404" || code == "408" ||
		code == "409" && (strings.Contains(desc, "batch completed") || strings.Contains(desc, "exceeds maxbytes")):
		// A request ended with this many deliveries never sent.
		n, err := strconv.Atoi(h.Get("Nats-Pending-Messages"))
		if err != nil {
			p.pending = 0 // unknown: ask again; asking for too much is harmless
		} else {
			p.pending = max(p.pending-n, 0)
		}
	case code == "409" && strings.Contains(desc, "leadership change"):
		p.pending = 0
	case code == "409" && strings.Contains(desc, "consumer deleted"):
		return errConsumerGone
	default:
		return fmt.Errorf("jetbus: pull refused: %s %s", code, h.Get("Description"))
	}
	return nil
}

// finish ends the pull of a stopping subscription: it asks for nothing more and takes what
// its requests still have coming (handled when draining, held for giving back otherwise),
// until nothing is left to come, or nothing arrived for a while (stopQuiet, then longer) and
// the consumer has nothing left to deliver, or stopLimit passed. close then unsubscribes and
// gives back. (A delivery the server assigns to a request just as it is unsubscribed, an
// event published at that moment, is dropped by the server and comes back after AckTimeout.)
func (p *puller) finish(handle func(natsjs.Msg, *deliveryEvent) time.Time) error {
	pc := p.pc
	defer p.sendAcks()
	take := func(pm *pulled) {
		if pc.sub.draining.Load() {
			handle(pm, &pm.de)
		} else {
			pc.holdBack(pm)
		}
	}
	for _, pm := range p.ahead {
		take(pm)
	}
	p.ahead = nil
	deadline := time.Now().Add(stopLimit)
	wait := stopQuiet
	quiet := time.NewTimer(wait)
	defer quiet.Stop()
	for p.pending > 0 && time.Now().Before(deadline) {
		select {
		case m := <-p.msgs:
			pm, err := p.take(m)
			if err != nil {
				return nil // the requests are over: nothing more to wait for
			}
			if pm != nil {
				take(pm)
			}
			quiet.Reset(wait) // quiet means nothing arrived for that long
		case <-quiet.C:
			// (select picks at random among ready cases: the timer may have won over
			// deliveries that arrived while the last one was handled.)
			if len(p.msgs) == 0 && p.consumerEmpty() {
				return nil
			}
			wait = min(2*wait, maxStopQuiet)
			quiet.Reset(wait)
		}
	}
	return nil
}

// consumerEmpty reports whether the consumer has no event left to deliver, so that this
// pull's requests would only be filled by events published from now on.
func (p *puller) consumerEmpty() bool {
	b := p.pc.sub.bus
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, p.pc.stream, p.pc.name)
	if err != nil {
		return errors.Is(err, natsjs.ErrConsumerNotFound)
	}
	return cons.CachedInfo().NumPending == 0
}

// close unsubscribes, then gives back the deliveries taken and not started and those still
// in the inbox (a nak each, see giveBackHeld); a draining subscription handles the latter
// instead.
func (p *puller) close() {
	pc := p.pc
	p.sendAcks()
	_ = p.sub.Unsubscribe()
	p.nc.RemoveStatusListener(p.status)
	rest := p.ahead
	p.ahead = nil
	for {
		select {
		case m := <-p.msgs:
			if pm, err := p.take(m); err == nil && pm != nil {
				rest = append(rest, pm)
			}
			continue
		default:
		}
		break
	}
	for _, pm := range rest {
		if pc.sub.stopping() && pc.sub.draining.Load() {
			pc.handle(pm, &pm.de)
		} else {
			pc.holdBack(pm)
		}
	}
	pc.giveBackHeld()
	p.sendAcks()
}

// holdBack keeps a delivery of a stopping unordered subscription that nobody started, for
// giveBackHeld (the key workers call it too).
func (pc *partConsumer) holdBack(pm *pulled) {
	pc.heldMu.Lock()
	pc.held = append(pc.held, pm)
	pc.heldMu.Unlock()
}

// giveBackHeld returns the held deliveries to the consumer with a nak, once this pull no
// longer receives (else the server could send them straight back to it): the server
// delivers them again at once, to whichever member pulls, and each counts as a delivery.
// One on its last attempt is handled instead: after a nak the server would give up on it
// (MaxDeliver) with no handler having seen it.
func (pc *partConsumer) giveBackHeld() {
	pc.heldMu.Lock()
	held := pc.held
	pc.held = nil
	pc.heldMu.Unlock()
	for _, pm := range held {
		if int(pm.de.meta.NumDelivered) >= pc.sub.opts.MaxAttempts {
			pc.handle(pm, &pm.de)
			continue
		}
		if err := pm.Nak(); err != nil {
			pc.log.Debug("giving back a delivery failed; it comes back after the ack timeout", "err", err)
		}
	}
}

// pulled is a delivery of an unordered pull: a natsjs.Msg settled by publishing to its
// reply subject, as nats.go's messages are, with its metadata parsed once.
type pulled struct {
	nc *nats.Conn
	// batch is the pull whose goroutine handles and acknowledges this delivery: its Ack
	// joins the pull's batch (nil: sent at once).
	batch *puller
	msg   *nats.Msg
	done  atomic.Bool // acked, nak'ed or terminated
	mu    sync.Mutex  // serializes settling
	// de is its metadata, and the Delivery and Event that handle makes of it: one
	// allocation per delivery.
	de deliveryEvent
}

var _ natsjs.Msg = (*pulled)(nil)

// Acknowledgement bodies (the JetStream API; nats.go sends the same).
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

func (m *pulled) Metadata() (*natsjs.MsgMetadata, error) { return &m.de.meta, nil }
func (m *pulled) Data() []byte                           { return m.msg.Data }
func (m *pulled) Headers() nats.Header                   { return m.msg.Header }
func (m *pulled) Subject() string                        { return m.msg.Subject }
func (m *pulled) Reply() string                          { return m.msg.Reply }
func (m *pulled) Nak() error                             { return m.settle(ackNak) }
func (m *pulled) Term() error                            { return m.settle(ackTerm) }

// Ack acknowledges the delivery: at once, or with the pull's next batch when it was handled
// on the pull's goroutine (see ackBatch).
func (m *pulled) Ack() error {
	if m.batch == nil {
		return m.settle(ackAck)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done.Load() {
		return natsjs.ErrMsgAlreadyAckd
	}
	m.done.Store(true)
	m.batch.holdAck(m.msg.Reply)
	return nil
}

func (m *pulled) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	return m.settle(fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()))
}

func (m *pulled) TermWithReason(reason string) error {
	return m.settle(append(append(ackTerm[:len(ackTerm):len(ackTerm)], ' '), reason...))
}

// InProgress restarts the delivery's ack timeout; it may be sent any number of times before
// the delivery is settled.
func (m *pulled) InProgress() error {
	if m.done.Load() {
		return natsjs.ErrMsgAlreadyAckd
	}
	return m.nc.Publish(m.msg.Reply, ackProgress)
}

// DoubleAck acknowledges and waits for the server to confirm it.
func (m *pulled) DoubleAck(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done.Load() {
		return natsjs.ErrMsgAlreadyAckd
	}
	if _, err := m.nc.RequestWithContext(ctx, m.msg.Reply, ackAck); err != nil {
		return err
	}
	m.done.Store(true)
	return nil
}

// settle sends body to the reply subject once; a second settlement is refused as nats.go
// refuses it.
func (m *pulled) settle(body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done.Load() {
		return natsjs.ErrMsgAlreadyAckd
	}
	if err := m.nc.Publish(m.msg.Reply, body); err != nil {
		return err
	}
	m.done.Store(true)
	return nil
}

// errAckSubject reports a reply subject that is not a JetStream delivery's.
var errAckSubject = errors.New("jetbus: not a JetStream ack subject")

// parseAckReply reads a delivery's metadata from its reply subject, as nats.go does:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>[.<token>…]
//
// (the domain "_" is none). It does not allocate: the strings are the subject's.
func parseAckReply(reply string, md *natsjs.MsgMetadata) error {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return fmt.Errorf("%w: %q", errAckSubject, reply)
	}
	// One pass over the subject (it runs for every delivery): where each of the first nine
	// tokens starts, and how many there are.
	var starts [10]int
	n := 1
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			if n < len(starts) {
				starts[n] = i + 1
			}
			n++
		}
	}
	tok := func(i int) string {
		if i+1 < n {
			return rest[starts[i] : starts[i+1]-1]
		}
		return rest[starts[i]:]
	}
	first, domain := 0, ""
	switch {
	case n == 7:
	case n >= 9:
		first, domain = 2, tok(0) // then the account hash
		if domain == "_" {
			domain = ""
		}
	default:
		return fmt.Errorf("%w: %q", errAckSubject, reply)
	}
	*md = natsjs.MsgMetadata{
		Sequence:     natsjs.SequencePair{Stream: parseNum(tok(first + 3)), Consumer: parseNum(tok(first + 4))},
		NumDelivered: parseNum(tok(first + 2)),
		NumPending:   parseNum(tok(first + 6)),
		Timestamp:    time.Unix(0, int64(parseNum(tok(first+5)))),
		Stream:       tok(first),
		Consumer:     tok(first + 1),
		Domain:       domain,
	}
	return nil
}

// parseNum reads a decimal number of an ack subject (0 for anything else), as nats.go does.
func parseNum(s string) uint64 {
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
