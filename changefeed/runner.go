package changefeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/internal/option"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/partition"
)

// Roles of a runner (a feed or a drainer), as Status reports them.
const (
	RoleStarting = "starting"
	RoleStandby  = "standby" // another runner holds the lease; this one waits to take over
	RoleActive   = "active"  // this runner holds the lease and publishes
	RoleFailed   = "failed"  // this runner holds the lease and publishes nothing (see Error)
	RoleStopped  = "stopped"
)

// readyGrace is how long a runner may fail to make progress (retrying a server that is
// unavailable) before Ready reports it.
const readyGrace = 30 * time.Second

// Option configures New and NewDrainer. A nil Option is skipped.
type Option func(*runOptions) error

type runOptions struct {
	option.Common
	dlq DeadLetters
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return option.Logger[runOptions](l) }

// WithRegisterer registers the runner's metrics on r (default: none); see the package doc.
func WithRegisterer(r prometheus.Registerer) Option { return option.Registerer[runOptions](r) }

// WithDeadLetters sets where what can never be published goes (a *dlq.Queue). Without it
// such a change or outbox document stops the runner (it is retried, never skipped).
func WithDeadLetters(q DeadLetters) Option {
	return func(o *runOptions) error { o.dlq = q; return nil }
}

// prepare is the start New and NewDrainer share: it checks the clients, applies the options,
// and returns the runner's logger (with kind: name) and metrics (prefix, name).
func prepare(bus Publisher, client *mongo.Client, opts []Option, kind, prefix, name string) (runOptions, *slog.Logger, *metrics, error) {
	if bus == nil || client == nil {
		return runOptions{}, nil, nil, fmt.Errorf("%w: nil Bus or MongoDB client", ErrInvalidConfig)
	}
	o, err := option.Apply[runOptions](opts)
	if err != nil {
		return o, nil, nil, err
	}
	m, err := newMetrics(o.Registerer, prefix, name)
	if err != nil {
		return o, nil, nil, err
	}
	return o, o.Logger.With(kind, name), m, nil
}

// runner is what feeds and drainers share: the lease, the sender, metrics, and the state
// Ready and Status report.
type runner struct {
	what    string // "changefeed <name>", "outbox <name>", for messages
	log     *slog.Logger
	metrics *metrics
	send    *sender
	lease   *leaseHolder

	lastChange atomic.Int64 // Unix ms of the last change (or outbox document) read

	mu    sync.Mutex
	state runnerState
}

// runnerState is what Status and Ready report.
type runnerState struct {
	role         string
	owner        string // the lease holder seen by a standby
	err          error  // the last error, cleared by progress
	errSince     time.Time
	failed       error     // set while RoleFailed
	saved        *Position // a feed's last position saved (or loaded)
	published    uint64
	deadLettered uint64
	duplicates   uint64    // publishes the server already had (re-published after a restart)
	lastChange   time.Time // time of the last change (or outbox document) read
}

// loop runs serve under the lease until ctx ends: a hot standby while another runner holds
// the lease, the active runner once this one takes it. It never gives up by itself.
func (r *runner) loop(ctx context.Context, serve func(context.Context) error) {
	defer r.update(func(s *runnerState) { s.role = RoleStopped })
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		l, err := r.lease.acquire(ctx, func(owner string) {
			r.update(func(s *runnerState) { s.role, s.owner = RoleStandby, owner })
		})
		if err != nil {
			if ctx.Err() == nil {
				r.noteErr(err)
				backoff.Wait(ctx.Done())
			}
			continue
		}
		r.update(func(s *runnerState) { s.role, s.owner = RoleActive, r.lease.member() })
		r.log.Info("active", "member", r.lease.member(), "previous", l.Previous)
		err = r.hold(ctx, l, serve)
		if err != nil && ctx.Err() == nil {
			r.noteErr(err)
			r.log.Warn("stopped; trying again", "err", err)
			backoff.Wait(ctx.Done())
			continue
		}
		backoff.Reset()
	}
}

// hold runs serve under lease l: a keeper renews l and cancels serve's context when l is
// lost; when serve returns, l is released unless it was lost.
func (r *runner) hold(ctx context.Context, l *partition.Lease, serve func(context.Context) error) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kctx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		if err := r.lease.keep(kctx, l); err != nil {
			cancel(err)
		}
	}()
	err := serve(sctx)
	stopKeeper()
	<-keeperDone
	if cause := context.Cause(sctx); errors.Is(cause, partition.ErrLeaseLost) {
		r.log.Warn("lease lost; stopped", "err", cause)
		return cause
	}
	if rerr := r.lease.release(l); rerr != nil {
		r.log.Warn("release failed; the lease will expire", "err", rerr)
	}
	return err
}

// ready is Ready of feeds and drainers: nil for a standby and for an active runner making
// progress; the failure while failed; the last error when it has not made progress for
// readyGrace.
func (r *runner) ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.state.role == RoleFailed:
		return fmt.Errorf("%s: %w", r.what, r.state.failed)
	case r.state.err != nil && time.Since(r.state.errSince) > readyGrace:
		return fmt.Errorf("%s: no progress since %s: %w", r.what, r.state.errSince.UTC().Format(time.RFC3339), r.state.err)
	}
	return nil
}

func (r *runner) update(fn func(*runnerState)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.state)
}

func (r *runner) snapshot() runnerState {
	r.mu.Lock()
	s := r.state
	r.mu.Unlock()
	if ms := r.lastChange.Load(); ms != 0 {
		s.lastChange = time.UnixMilli(ms)
	}
	return s
}

// read records the time of the change (or outbox document) just read, for the lag.
func (r *runner) read(at time.Time) {
	r.metrics.lagged(at)
	r.lastChange.Store(at.UnixMilli())
}

// noteErr records an error that keeps the runner from progressing.
func (r *runner) noteErr(err error) {
	r.update(func(s *runnerState) {
		if s.err == nil {
			s.errSince = time.Now()
		}
		s.err = err
	})
}

// progressed clears the recorded error.
func (r *runner) progressed() {
	r.update(func(s *runnerState) { s.err = nil })
}

// setFailed enters (err non-nil) or leaves the failed state.
func (r *runner) setFailed(err error) {
	r.update(func(s *runnerState) {
		s.failed = err
		if err != nil {
			s.role = RoleFailed
		} else if s.role == RoleFailed {
			s.role = RoleActive
		}
	})
	if r.metrics != nil {
		v := 0.0
		if err != nil {
			v = 1
		}
		set(r.metrics.failed, v)
	}
}

// counted records one settled change or document: dead-lettered, or published (dup: the
// server had it already, a re-publish after a restart that JetStream dropped).
func (r *runner) counted(rejected, dup bool) {
	r.metrics.publish(rejected, dup)
	r.mu.Lock()
	first := false
	switch {
	case rejected:
		r.state.deadLettered++
	case dup:
		r.state.duplicates++
		first = r.state.duplicates == 1
	default:
		r.state.published++
	}
	r.state.err = nil
	r.mu.Unlock()
	if first {
		r.log.Info("re-published events the server already had were dropped as duplicates (a restart)")
	}
}

// errorText is the error Status shows.
func (s *runnerState) errorText() string {
	switch {
	case s.failed != nil:
		return s.failed.Error()
	case s.err != nil:
		return s.err.Error()
	}
	return ""
}
