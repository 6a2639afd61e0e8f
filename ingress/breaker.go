package ingress

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// breaker records whether JetStream stores ingress's events. It opens on the first publish
// that fails for a reason not the client's (unreachable, no acknowledgement in time) and
// closes on the next success or when the prober reaches the topic's stream. While open,
// requests are answered unavailable at once and fire-and-forget messages wait in the retry
// queue, so that a dead JetStream costs neither a timeout per message nor memory beyond the
// in-flight bound.
type breaker struct {
	down  atomic.Bool
	mu    sync.Mutex
	up    chan struct{} // closed while JetStream is available
	topic string        // the topic whose publish failed last: what the prober asks about
	since time.Time
	kick  chan struct{} // wakes the prober
	// Logging: an opening is logged at most every breakerLogEvery, with how many there were.
	lastLog time.Time
	opens   int
	log     *slog.Logger
	gauge   interface{ Set(float64) }
}

// breakerLogEvery bounds how often the breaker logs that it opened: a stream that refuses
// writes opens it after every probe.
const breakerLogEvery = 10 * time.Second

func newBreaker(log *slog.Logger, gauge interface{ Set(float64) }) *breaker {
	up := make(chan struct{})
	close(up)
	return &breaker{up: up, kick: make(chan struct{}, 1), log: log, gauge: gauge}
}

func (b *breaker) isDown() bool { return b.down.Load() }

// open records that a publish to topic failed with err.
func (b *breaker) open(topic string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.topic = topic
	if b.down.Load() {
		return
	}
	b.down.Store(true)
	b.up = make(chan struct{})
	b.since = time.Now()
	b.gauge.Set(1)
	b.opens++
	if time.Since(b.lastLog) >= breakerLogEvery {
		b.log.Warn("JetStream unavailable: requests are answered unavailable, fire-and-forget messages wait (up to max_in_flight)",
			"topic", topic, "error", err, "times_since_last_log", b.opens)
		b.lastLog, b.opens = b.since, 0
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// close records that JetStream stores events again.
func (b *breaker) close(how string) {
	if !b.down.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return
	}
	b.down.Store(false)
	close(b.up)
	b.gauge.Set(0)
	level := slog.LevelDebug
	if time.Since(b.since) >= time.Second {
		level = slog.LevelInfo
	}
	b.log.Log(context.Background(), level, "JetStream available again",
		"after", time.Since(b.since).Round(time.Millisecond).String(), "seen_by", how)
}

// wait blocks until JetStream is available; false when done closes first.
func (b *breaker) wait(done <-chan struct{}) bool {
	b.mu.Lock()
	up := b.up
	b.mu.Unlock()
	select {
	case <-up:
		return true
	case <-done:
		return false
	}
}

func (b *breaker) probeTopic() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.topic
}

// deadlines hands out contexts that end between 0.9·d and d after a message's receipt,
// sharing one context among the messages received within d/10: the pipeline needs a bound
// per message, and a timer per message would cost more than the rest of its handling. Not
// safe for concurrent use: each goroutine has its own.
type deadlines struct {
	parent context.Context
	d      time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

func (x *deadlines) at(start time.Time) context.Context {
	want := start.Add(x.d)
	if x.ctx == nil || x.end.After(want) || x.end.Before(want.Add(-x.d/10)) {
		x.stop()
		x.ctx, x.cancel = context.WithDeadline(x.parent, want)
		x.end = want
	}
	return x.ctx
}

func (x *deadlines) stop() {
	if x.cancel != nil {
		x.cancel()
	}
}
