package wiring

import (
	"context"
	"errors"
)

// resources is the one cleanup idiom of the wiring: everything opened is added as it opens,
// and closed last-opened first, exactly once. Setup functions run again while they fail
// (process.Spec.Setup), so a failed setup closes what it opened before returning
// (closeOnError); a successful one hands its resources to the process (env.OnClose).
type resources struct {
	fns []func() error
}

// add registers close to run when the resources close.
func (r *resources) add(close func() error) { r.fns = append(r.fns, close) }

// Close closes everything added, last first, and returns every error joined.
func (r *resources) Close() error {
	var errs []error
	for i := len(r.fns) - 1; i >= 0; i-- {
		errs = append(errs, r.fns[i]())
	}
	r.fns = nil
	return errors.Join(errs...)
}

// closeOnError closes r when *err is set: a deferred call in a function that opens r.
func (r *resources) closeOnError(err *error) {
	if *err != nil {
		_ = r.Close()
	}
}

// closeWith adapts r to env.OnClose.
func (r *resources) closeWith(context.Context) error { return r.Close() }
