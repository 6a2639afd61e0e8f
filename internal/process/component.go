package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jetbus/jetbus/internal/ops"
)

// Component is one long-running part of a process: the DLQ sweeper, ingress, a changefeed, a
// projection. Run runs until ctx is done, then stops taking new work, finishes or hands back
// what it holds (acks, leases) and returns nil; an error ends the whole process. Run is called
// once.
type Component interface {
	Name() string
	Run(ctx context.Context) error
}

// Readier is a Component that can tell whether it is ready to serve (/readyz). Ready must be
// cheap and safe to call concurrently with Run.
type Readier interface {
	Ready(ctx context.Context) error
}

// Statuser is a Component that reports details for /v1/ops/status (a feed's position, a
// projection's lag). Status must be safe to call concurrently with Run and return a value
// that encodes to JSON.
type Statuser interface {
	Status(ctx context.Context) (any, error)
}

// States of a component, as ops.ComponentStatus reports them.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// ErrShutdownTimeout is returned by Runner.Run when components were still running when the
// shutdown deadline passed.
var ErrShutdownTimeout = errors.New("process: shutdown deadline passed with components still running")

// Runner runs components and owns their goroutines: Run returns only after every component
// returned, or when the shutdown deadline passed.
type Runner struct {
	log   *slog.Logger
	comps []Component

	mu    sync.Mutex
	state map[string]string
	errs  map[string]error
}

// NewRunner returns a Runner of comps; names must be unique. log nil discards.
func NewRunner(log *slog.Logger, comps ...Component) (*Runner, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{log: log, comps: comps, state: map[string]string{}, errs: map[string]error{}}
	for _, c := range comps {
		if _, dup := r.state[c.Name()]; dup {
			return nil, fmt.Errorf("process: two components named %q", c.Name())
		}
		r.state[c.Name()] = StateStarting
	}
	return r, nil
}

// Run starts every component and waits. When ctx is done it cancels the components and waits
// at most drain for them to return; ErrShutdownTimeout when they did not. When a component
// fails, Run stops the others the same way and returns that error.
func (r *Runner) Run(ctx context.Context, drain time.Duration) error {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type result struct {
		name string
		err  error
	}
	done := make(chan result, len(r.comps))
	for _, c := range r.comps {
		r.set(c.Name(), StateRunning, nil)
		go func() {
			err := c.Run(cctx)
			if errors.Is(err, context.Canceled) && cctx.Err() != nil {
				err = nil
			}
			done <- result{c.Name(), err}
		}()
	}
	running := len(r.comps)
	var failure error
	finish := func(res result) {
		running--
		if res.err != nil {
			r.set(res.name, StateFailed, res.err)
			r.log.Error("component failed", "component", res.name, "error", res.err)
			if failure == nil {
				failure = fmt.Errorf("%s: %w", res.name, res.err)
			}
			return
		}
		r.set(res.name, StateStopped, nil)
		r.log.Info("component stopped", "component", res.name)
	}
	// Until the signal or a failure; a component that returned nil leaves the others (and
	// the operations server) running.
	for failure == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case res := <-done:
			finish(res)
		}
	}
	cancel()
	if running == 0 {
		return failure
	}
	r.log.Info("stopping components", "running", running, "deadline", drain.String())
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	for running > 0 {
		select {
		case res := <-done:
			finish(res)
		case <-deadline.C:
			return errors.Join(failure, fmt.Errorf("%w (%d of %d)", ErrShutdownTimeout, running, len(r.comps)))
		}
	}
	return failure
}

func (r *Runner) set(name, s string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state[name] = s
	r.errs[name] = err
}

// Ready returns nil when every component runs and every Readier is ready.
func (r *Runner) Ready(ctx context.Context) error {
	var errs []error
	for _, st := range r.Statuses(ctx, false) {
		if !st.Ready {
			errs = append(errs, fmt.Errorf("%s: %s", st.Name, st.Error))
		}
	}
	return errors.Join(errs...)
}

// Statuses reports every component; with detail, the Statusers' details too.
func (r *Runner) Statuses(ctx context.Context, detail bool) []ops.ComponentStatus {
	out := make([]ops.ComponentStatus, 0, len(r.comps))
	for _, c := range r.comps {
		r.mu.Lock()
		st := ops.ComponentStatus{Name: c.Name(), State: r.state[c.Name()]}
		if err := r.errs[c.Name()]; err != nil {
			st.Error = err.Error()
		}
		r.mu.Unlock()
		switch {
		case st.State != StateRunning:
			if st.Error == "" {
				st.Error = st.State
			}
		default:
			st.Ready = true
			if rd, ok := c.(Readier); ok {
				if err := rd.Ready(ctx); err != nil {
					st.Ready, st.Error = false, err.Error()
				}
			}
		}
		if s, ok := c.(Statuser); ok && detail {
			d, err := s.Status(ctx)
			if err != nil {
				d = map[string]string{"error": err.Error()}
			}
			st.Detail = d
		}
		out = append(out, st)
	}
	return out
}

// Func adapts a function to a Component.
func Func(name string, run func(ctx context.Context) error) Component {
	return funcComponent{name, run}
}

type funcComponent struct {
	name string
	run  func(context.Context) error
}

func (f funcComponent) Name() string                  { return f.name }
func (f funcComponent) Run(ctx context.Context) error { return f.run(ctx) }
