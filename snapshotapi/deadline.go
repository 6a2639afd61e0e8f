package snapshotapi

import (
	"context"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// requestContext is the echo.Context of a request under way: echo's, and the request's
// context bounded by Config.RequestTimeout.
type requestContext struct {
	echo.Context
	ctx deadlineCtx
}

// ctxOf returns the request's bounded context.
func ctxOf(c echo.Context) context.Context {
	if rc, ok := c.(*requestContext); ok {
		return &rc.ctx
	}
	return c.Request().Context()
}

// deadlineCtx is its parent with a deadline, whose timer is made only when something
// waits on it (Done or Err): a request answered from memory — a 304 from the cache — never
// pays for a timer, one that reaches MongoDB or NATS is bounded as with context.WithDeadline
// (the drivers read Deadline and wait on Done).
type deadlineCtx struct {
	context.Context // the parent
	deadline        time.Time

	mu     sync.Mutex
	timed  context.Context
	cancel context.CancelFunc
}

func (d *deadlineCtx) Deadline() (time.Time, bool) {
	if pd, ok := d.Context.Deadline(); ok && pd.Before(d.deadline) {
		return pd, true
	}
	return d.deadline, true
}

func (d *deadlineCtx) bounded() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timed == nil {
		d.timed, d.cancel = context.WithDeadline(d.Context, d.deadline)
	}
	return d.timed
}

func (d *deadlineCtx) Done() <-chan struct{} { return d.bounded().Done() }
func (d *deadlineCtx) Err() error            { return d.bounded().Err() }

// stop releases the timer, if one was made.
func (d *deadlineCtx) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
	}
}
