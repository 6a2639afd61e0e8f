package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/option"
	"github.com/jetbus/jetbus/internal/spans"
)

// Publisher is what ingress publishes through: the jetbus.AsyncPublisher capability of a
// Bus (a jetstream.Bus opened with the schema registry's publish middleware). Its bound on
// pending async publishes (jetstream.WithAsyncMaxPending) must be at least
// Config.MaxInFlight. JetStream is used to probe a topic's stream while publishes fail.
type Publisher interface {
	jetbus.AsyncPublisher
	JetStream() natsjs.JetStream
}

// DeadLetters keeps what ingress refuses from fire-and-forget clients: a *dlq.Queue.
type DeadLetters interface {
	Reject(ctx context.Context, r dlq.Rejected) (uint64, error)
}

var _ DeadLetters = (*dlq.Queue)(nil)

// rejecters is the number of goroutines writing dead letters: each waits for the DLQ's
// acknowledgement, so a few keep a flood of garbage from holding up the rest.
const rejecters = 4

// Ingress is the service that takes what plain NATS clients publish to "in.<topic>" into
// jetbus topics. Create it with New and run it with Run; it is a process component (Name,
// Run, Ready, Status).
type Ingress struct {
	conn   *nats.Conn
	pub    Publisher
	dl     DeadLetters
	cfg    Config
	log    *slog.Logger
	m      *metrics
	topics map[string]*topicMetrics // the allowed topics
	other  *topicMetrics
	brk    *breaker
	// tracer is nil when ingress does not trace; spanOf holds the allowed topics' span
	// settings, otherSpan those of every other subject.
	tracer    trace.Tracer
	spanOf    map[string]*ingressSpan
	otherSpan *ingressSpan

	slots   chan struct{} // one per message held: the in-flight bound
	acks    chan *item    // published, awaiting JetStream's acknowledgement, in order
	retries chan *item    // fire-and-forget messages to publish again once JetStream is back
	rejects chan *item    // fire-and-forget messages to dead-letter
	// refusing are the places of refused messages being dead-lettered: a pool of their own,
	// so that a flood of refusals never holds the places valid messages need.
	refusing chan struct{}

	// gate orders the end of Run against handle: once closed, handle queues nothing.
	gate       sync.RWMutex
	gateClosed bool

	work       context.Context // cancelled at the drain deadline: every wait ends
	cancelWork context.CancelFunc
	cbDeadline deadlines // handle's; handle runs on the subscription's one goroutine

	started    atomic.Bool
	ready      atomic.Bool
	stallSince atomic.Int64 // Unix nanoseconds when the current back-pressure began; 0: none
	stallN     atomic.Int64 // back-pressure episodes ended since the monitor last logged
	stallTime  atomic.Int64 // and their total, in nanoseconds
	sub        atomic.Pointer[nats.Subscription]
	dropLog    atomic.Int64 // Unix nanoseconds of the last slow-consumer log
	verbLog    atomic.Int64 // Unix nanoseconds of the last log of a discovery request refused
	refuseLog  atomic.Int64 // Unix nanoseconds of the last log of a refusal dropped
	shedLog    atomic.Int64 // Unix nanoseconds of the last log of a message shed
	stats      struct {
		accepted, duplicates, dropped, abandoned atomic.Uint64
		refusalsDropped, shed                    atomic.Uint64
		rejected                                 [7]atomic.Uint64
		// errors counts the messages taken and refused or shed: $SRV.STATS's num_errors;
		// lastCode is the last one's Code index plus one (0: none), for its last_error.
		errors   atomic.Uint64
		lastCode atomic.Int32
	}
}

// New returns the ingress service. conn carries the service: its subscription to "in.>" in
// queue group QueueGroup, the micro service's $SRV endpoints and the replies. It must be a
// connection of its own, with no subscriptions (ErrSharedConn): a clean shutdown waits until
// every message the subscription buffered has been taken, which ingress sees as its
// connection's subscriptions going away. Ingress does not close conn. pub publishes the
// events and dl keeps the refused fire-and-forget messages. Options:
//
//   - WithLogger: logger (default discard).
//   - WithRegisterer: Prometheus registerer for the metrics (default none).
//   - WithTracerProvider: OpenTelemetry tracer provider (default the global one).
func New(conn *nats.Conn, pub Publisher, dl DeadLetters, cfg Config, opts ...Option) (*Ingress, error) {
	if conn == nil || pub == nil || dl == nil {
		return nil, fmt.Errorf("%w: ingress needs a connection, a Publisher and DeadLetters", jetbus.ErrInvalidOption)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if n := conn.NumSubscriptions(); n != 0 {
		return nil, fmt.Errorf("%w (%d)", ErrSharedConn, n)
	}
	o, err := option.Apply[option.Common](opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	log := o.Logger.With("component", "ingress/in")
	g := &Ingress{
		conn: conn, pub: pub, dl: dl, cfg: cfg, log: log, m: m,
		topics:   make(map[string]*topicMetrics, len(cfg.Allow)),
		other:    m.topic(otherTopic),
		brk:      newBreaker(log, m.unavailable),
		slots:    make(chan struct{}, cfg.MaxInFlight),
		acks:     make(chan *item, cfg.MaxInFlight),
		retries:  make(chan *item, cfg.MaxInFlight),
		rejects:  make(chan *item, cfg.MaxInFlight),
		refusing: make(chan struct{}, cfg.MaxInFlight),
	}
	for _, t := range cfg.Allow {
		g.topics[t] = m.topic(t)
	}
	if g.tracer = spans.Tracer(o.TracerProvider, scope); g.tracer != nil {
		g.spanOf = make(map[string]*ingressSpan, len(cfg.Allow))
		for _, t := range cfg.Allow {
			g.spanOf[t] = newIngressSpan(t)
		}
		g.otherSpan = newIngressSpan(otherTopic)
	}
	return g, nil
}

// Name implements the process component.
func (g *Ingress) Name() string { return "ingress/in" }

// Ready reports nil while the service is subscribed and serving.
func (g *Ingress) Ready(context.Context) error {
	if !g.ready.Load() {
		return errors.New("ingress is not serving")
	}
	return nil
}

// Run serves until ctx is done, then drains: it unsubscribes, takes every message NATS had
// buffered, waits for the outstanding acknowledgements, retries and dead letters, and
// returns nil, all within Config.DrainTimeout. It returns an error when the service cannot
// start or its connection closes. Run may be called once.
func (g *Ingress) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return errors.New("ingress: Run called twice")
	}
	if n := g.conn.NumSubscriptions(); n != 0 {
		return fmt.Errorf("%w (%d)", ErrSharedConn, n)
	}
	g.work, g.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	g.cbDeadline = deadlines{parent: g.work, d: g.cfg.AckTimeout}
	stages := g.startStages()

	prevErr := g.conn.ErrorHandler()
	g.conn.SetErrorHandler(g.asyncError(prevErr))
	stopped := make(chan struct{})
	var once sync.Once
	g.conn.SetClosedHandler(func(*nats.Conn) { once.Do(func() { close(stopped) }) })
	svc, err := g.serve()
	if err != nil {
		g.finish(stages)
		g.conn.SetErrorHandler(prevErr)
		return err
	}
	g.ready.Store(true)
	g.log.Info("ingress serving", "subject", Subject, "queue_group", QueueGroup, "allow", g.cfg.Allow,
		"max_in_flight", g.cfg.MaxInFlight, "max_message_size", g.cfg.MaxMessageSize)

	var runErr error
	select {
	case <-ctx.Done():
	case <-stopped:
		runErr = errors.New("ingress: the service stopped: its NATS connection closed")
	}
	g.ready.Store(false)
	g.drain(svc)
	g.finish(stages)
	if !g.conn.IsClosed() {
		g.conn.SetErrorHandler(prevErr)
	}
	g.log.Info("ingress stopped", "accepted", g.stats.accepted.Load(), "abandoned", g.stats.abandoned.Load())
	return runErr
}

// drain stops the service and waits until every message its subscription buffered has been
// taken, or the drain deadline passes; then no message is taken any more.
func (g *Ingress) drain(svc *service) {
	deadline := time.AfterFunc(g.cfg.DrainTimeout, g.cancelWork)
	defer deadline.Stop()
	svc.stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for g.conn.NumSubscriptions() > 0 && !g.conn.IsClosed() {
		select {
		case <-tick.C:
		case <-g.work.Done():
			g.log.Warn("ingress: drain deadline passed before the subscription was drained", "drain_timeout", g.cfg.DrainTimeout.String())
			g.closeGate()
			return
		}
	}
	g.closeGate()
}

func (g *Ingress) closeGate() {
	g.gate.Lock()
	defer g.gate.Unlock()
	if !g.gateClosed {
		g.gateClosed = true
		close(g.acks)
	}
}

// handle takes one message off the subscription: it checks it, publishes it asynchronously
// and hands it to the acknowledgement waiter, or refuses it. It runs on the subscription's
// goroutine, one message at a time, so that publishes leave in the order messages came.
func (g *Ingress) handle(subject, reply string, header nats.Header, data []byte) {
	if !g.acquire() {
		g.turnAway(subject, reply)
		return
	}
	it := &item{subject: subject, reply: reply, header: header, data: data, start: time.Now()}
	it.topic = strings.TrimPrefix(it.subject, SubjectPrefix)
	g.startSpan(it)
	g.gate.RLock()
	defer g.gate.RUnlock()
	if g.gateClosed {
		g.release()
		endSpan(it, nil, false, nil, errStopping)
		g.turnAway(it.subject, it.reply)
		return
	}
	if ref := g.check(it); ref != nil {
		g.refused(it, ref)
		return
	}
	if g.brk.isDown() {
		if it.reply != "" {
			g.refused(it, refuse(CodeUnavailable, nil, "JetStream is unavailable: nothing was stored; retry later"))
			return
		}
		g.retries <- it
		return
	}
	fut, err := g.pub.PublishAsync(traced(g.cbDeadline.at(it.start), it), it.topic, json.RawMessage(it.data), it.opts...)
	if err != nil {
		g.failed(it, err, false)
		return
	}
	it.fut, it.event = fut, fut.Event()
	g.acks <- it
}

// acquire takes an in-flight slot, waiting while all are held (back-pressure: the
// subscription's buffer fills meanwhile). It returns false when ingress is past its drain
// deadline.
func (g *Ingress) acquire() bool {
	select {
	case g.slots <- struct{}{}:
		g.m.inflight.Inc()
		return true
	default:
	}
	t0 := time.Now()
	g.stallSince.Store(t0.UnixNano())
	g.m.stalled.Set(1)
	g.m.stalls.Inc()
	ok := true
	select {
	case g.slots <- struct{}{}:
		g.m.inflight.Inc()
	case <-g.work.Done():
		ok = false
	}
	d := time.Since(t0)
	g.stallN.Add(1)
	g.stallTime.Add(int64(d))
	g.m.stalledSecs.Add(d.Seconds())
	g.m.stalled.Set(0)
	g.stallSince.Store(0)
	return ok
}

func (g *Ingress) release() {
	<-g.slots
	g.m.inflight.Dec()
}

// turnAway answers a message ingress can no longer take (it is past its drain deadline).
func (g *Ingress) turnAway(subject, reply string) {
	if reply != "" && g.replyAllowed(reply) {
		g.send(replyError(reply, refuse(CodeUnavailable, nil, "ingress is stopping: nothing was stored; retry")))
		return
	}
	g.stats.abandoned.Add(1)
	g.m.abandoned.Inc()
	g.log.Debug("ingress stopping: message abandoned", "subject", subject)
}

func (g *Ingress) metricsOf(topic string) *topicMetrics {
	if tm := g.topics[topic]; tm != nil {
		return tm
	}
	return g.other
}

// refused counts a refusal and answers it, or queues the message for the DLQ when there is
// no one to answer. CodeUnavailable is never dead-lettered: fire-and-forget messages that
// JetStream did not store are retried instead (see failed).
func (g *Ingress) refused(it *item, r *refusal) {
	i := r.code.index()
	g.stats.rejected[i].Add(1)
	g.metricsOf(it.topic).rejected[i].Inc()
	g.noteError(r.code)
	if it.reply != "" {
		g.send(replyError(it.reply, r))
		g.release()
		endSpan(it, nil, false, r, nil)
		return
	}
	// The message moves from a valid message's place to one of the refusals' own; when all
	// those are taken (a flood of refusals faster than the DLQ takes them), it is dropped,
	// counted: refused traffic never slows valid traffic down.
	it.ref = r
	g.release()
	select {
	case g.refusing <- struct{}{}:
		it.refusal = true
		g.rejects <- it
	default:
		g.stats.refusalsDropped.Add(1)
		g.m.refusalsDropped.Inc()
		g.logDroppedRefusal(it)
		endSpan(it, nil, false, r, nil)
	}
}

// releaseItem gives back the place it holds: a valid message's or a refusal's.
func (g *Ingress) releaseItem(it *item) {
	if it.refusal {
		<-g.refusing
		return
	}
	g.release()
}

// failed handles a publish that did not succeed: a refusal the Bus or the registry made is
// answered or dead-lettered; anything else means JetStream did not store the event: a request
// is answered unavailable (with the event ID when the event was sent, since it may have been
// stored), a fire-and-forget message waits for a retry. async says the error came from the
// acknowledgement, where "topic not found" means no stream answered, which is also what a
// JetStream that is down looks like: the retry (or the client's) tells them apart.
func (g *Ingress) failed(it *item, err error, async bool) {
	r := refusalOf(err)
	if async && errors.Is(err, jetbus.ErrTopicNotFound) {
		r = refuse(CodeUnavailable, nil, "%s", err)
	}
	if r.code != CodeUnavailable {
		g.refused(it, r)
		return
	}
	g.brk.open(it.topic, err)
	if it.reply == "" {
		g.retries <- it
		return
	}
	if it.event == nil {
		g.refused(it, refuse(CodeUnavailable, nil, "JetStream did not take the event (%v): nothing was stored; retry later", err))
		return
	}
	msg := fmt.Sprintf("JetStream did not acknowledge the event (%v): it may be stored; retry with Nats-Msg-Id %q to store it at most once", err, it.event.ID)
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("no acknowledgement from JetStream within %s: the event may be stored; retry with Nats-Msg-Id %q to store it at most once", g.cfg.AckTimeout, it.event.ID)
	}
	g.refused(it, refuse(CodeUnavailable, map[string]any{"id": it.event.ID}, "%s", msg))
}

// stored counts a stored event and answers it. retried says the event was published again by
// ingress, so a duplicate is its own earlier attempt, not the client's.
func (g *Ingress) stored(it *item, e *jetbus.Event, dup, retried bool) {
	tm := g.metricsOf(it.topic)
	tm.accepted.Inc()
	g.stats.accepted.Add(1)
	if dup && !retried {
		tm.duplicates.Inc()
		g.stats.duplicates.Add(1)
	}
	tm.latency.Observe(float64(time.Since(it.start).Microseconds()) / 1000)
	if it.reply != "" {
		g.send(&nats.Msg{Subject: it.reply, Data: replyOK(e, dup)})
	}
	g.release()
	endSpan(it, e, dup, nil, nil)
}

// noteError counts a message taken and refused or shed, for $SRV.STATS.
func (g *Ingress) noteError(c Code) {
	g.stats.errors.Add(1)
	g.stats.lastCode.Store(int32(c.index()) + 1)
}

// lastError is $SRV.STATS's last_error: "<status>:<code>" of the last refusal, as a micro
// service's is "<code>:<description>" of its last error. It holds no text of the message or
// of its refusal's reason: any client may ask for STATS, and the reason can quote another
// client's subject, headers or payload.
func (g *Ingress) lastError() string {
	i := g.stats.lastCode.Load()
	if i == 0 {
		return ""
	}
	c := Codes[i-1]
	return strconv.Itoa(c.Status()) + ":" + string(c)
}

func (g *Ingress) send(m *nats.Msg) {
	if err := g.conn.PublishMsg(m); err != nil {
		g.log.Debug("ingress: reply not sent", "reply", m.Subject, "error", err)
	}
}

// asyncError learns the subscription from NATS's slow-consumer error, to count what it drops,
// and logs it (at most every backPressureLogEvery) instead of passing it on: the
// connection's own handler sees every other error.
func (g *Ingress) asyncError(prev nats.ErrHandler) nats.ErrHandler {
	return func(c *nats.Conn, sub *nats.Subscription, err error) {
		if sub == nil || sub.Subject != Subject || !errors.Is(err, nats.ErrSlowConsumer) {
			if prev != nil {
				prev(c, sub, err)
			}
			return
		}
		g.sub.Store(sub)
		if logDue(&g.dropLog) {
			g.log.Warn("NATS is dropping messages to ingress: its pending buffer is full (slow consumer); clients publish faster than JetStream stores",
				"max_pending_msgs", g.cfg.PendingMsgs, "max_pending_bytes", g.cfg.PendingBytes)
		}
	}
}

// Stats is what ingress reports in $SRV.STATS (the endpoint's data) and /v1/ops/status.
type Stats struct {
	Allow       []string `json:"allow"`
	InFlight    int      `json:"in_flight"`
	MaxInFlight int      `json:"max_in_flight"`
	// Backpressure is true while ingress is not taking messages because MaxInFlight are held.
	Backpressure bool `json:"backpressure"`
	// JetStreamUnavailable is true while publishes fail: requests are answered unavailable,
	// fire-and-forget messages wait.
	JetStreamUnavailable bool            `json:"jetstream_unavailable"`
	Accepted             uint64          `json:"accepted"`
	Duplicates           uint64          `json:"duplicates"`
	Rejected             map[Code]uint64 `json:"rejected"`
	Dropped              uint64          `json:"dropped"`
	Abandoned            uint64          `json:"abandoned"`
	// RefusalsDropped counts refused fire-and-forget messages not dead-lettered: every
	// place of the refusals' own was taken (a flood of them).
	RefusalsDropped uint64 `json:"refusals_dropped"`
	// Shed counts messages dropped unchecked while the subscription's buffer was filling
	// (see Config.PendingBytes): a request among them was answered unavailable.
	Shed uint64 `json:"shed"`
	// PendingMsgs and PendingBytes are what the subscription's buffer holds now: received
	// from NATS, not yet taken (bounded by Config.PendingMsgs and PendingBytes).
	PendingMsgs  int `json:"pending_msgs"`
	PendingBytes int `json:"pending_bytes"`
}

// Stats returns the counters since New.
func (g *Ingress) Stats() Stats {
	s := Stats{
		Allow: g.cfg.Allow, InFlight: len(g.slots), MaxInFlight: g.cfg.MaxInFlight,
		Backpressure: g.stallSince.Load() != 0, JetStreamUnavailable: g.brk.isDown(),
		Accepted: g.stats.accepted.Load(), Duplicates: g.stats.duplicates.Load(),
		Dropped: g.stats.dropped.Load(), Abandoned: g.stats.abandoned.Load(), RefusalsDropped: g.stats.refusalsDropped.Load(),
		Shed:     g.stats.shed.Load(),
		Rejected: make(map[Code]uint64, len(Codes)),
	}
	if sub := g.sub.Load(); sub != nil {
		s.PendingMsgs, s.PendingBytes, _ = sub.Pending()
	}
	for i, c := range Codes {
		if n := g.stats.rejected[i].Load(); n > 0 {
			s.Rejected[c] = n
		}
	}
	return s
}

// Status implements the process component's status: Stats.
func (g *Ingress) Status(context.Context) (any, error) { return g.Stats(), nil }
