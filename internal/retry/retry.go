// Package retry is jetbus's one rule for which failures are worth another try, and the one
// backoff between tries. Every jetbus loop that retries I/O uses it: requests to JetStream
// (consumer and stream management, stream scans), the pull loop of a subscription, the
// partition owner's lease acquisition, and the MongoDB-facing packages.
//
// It does not decide when an event has failed: handler retries count the broker's deliveries
// (jetbus.Backoff, NakWithDelay), not this package.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/jetbus/jetbus"
)

// Transient reports whether err may go away by itself, so that the same request, made again
// later, can succeed. It is the one rule every retry in jetbus follows:
//
//   - never transient: nil, context.Canceled (unless a MongoDB connection error wraps it:
//     the driver's own cancellation), a closed connection or handle
//     (nats.ErrConnectionClosed, jetbus.ErrClosed), and every error not named below: a bad
//     request stays bad;
//   - transient: jetbus.ErrUnavailable; context.DeadlineExceeded (one bounded try timed
//     out: the caller checks its own context separately); NATS timeouts, no responders, a
//     connection that is reconnecting or disconnected; JetStream API errors that say the
//     cluster cannot answer right now (no leader, not available, not assigned, incomplete
//     results: codes 10004, 10007, 10008, 10009, 10163), or cannot place a replicated
//     stream or consumer while a peer is offline (no suitable peers: 10005 — a node
//     restarting; a cluster too small for the replicas asked answers it for good, and the
//     callers' retries log it until their context ends); a pull interrupted by a
//     leadership change or missing its heartbeats; a network error that reports
//     Timeout(); and errors MongoDB labels as worth retrying (RetryableWriteError,
//     TransientTransactionError, NetworkError, ResumableChangeStreamError).
//
// Errors are examined through their whole wrap chain (errors.Is / errors.As).
func Transient(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, jetbus.ErrClosed):
		return false
	case errors.Is(err, context.Canceled):
		// The caller's cancellation is never transient; but a MongoDB connection error
		// wrapping one is the driver cancelling a connection it was opening (its pool was
		// cleared by another operation's failure), the caller's context alive: the next try
		// opens a new connection.
		return errors.As(err, &topology.ConnectionError{})
	case errors.Is(err, jetbus.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, natsjs.ErrConsumerLeadershipChanged),
		errors.Is(err, natsjs.ErrNoHeartbeat):
		return true
	}
	var api *natsjs.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10004, // incomplete results
			10005, // no suitable peers for placement (a peer offline: a node restarting)
			10007, // cluster not assigned to this server (a group moving)
			10008, // JetStream system temporarily unavailable
			10009, // cluster can not handle request (not the leader)
			10163: // expected last sequence per subject temporarily unavailable
			return true
		}
		return false
	}
	// No server could be selected (MongoDB unreachable, an election): the driver's own
	// deadline ran out, not the caller's, and the next try may find a primary.
	if errors.As(err, &topology.ServerSelectionError{}) {
		return true
	}
	var labeled interface{ HasErrorLabel(string) bool }
	if errors.As(err, &labeled) {
		for _, l := range mongoLabels {
			if labeled.HasErrorLabel(l) {
				return true
			}
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// mongoLabels are the error labels with which MongoDB and its driver mark a failure that a
// retry may overcome.
var mongoLabels = []string{"RetryableWriteError", "TransientTransactionError", "NetworkError", "ResumableChangeStreamError"}

// Backoff is the delay between tries: Min, then doubling up to Max, each delay drawn
// uniformly from its upper half so that replicas retrying together spread out. The zero
// value waits 50ms doubling to 2s. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Default delays of a zero Backoff.
const (
	DefaultMin = 50 * time.Millisecond
	DefaultMax = 2 * time.Second
)

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi < lo {
		hi = max(lo, DefaultMax)
	}
	if b.cur == 0 {
		b.cur = lo
	} else {
		b.cur = min(2*b.cur, hi)
	}
	half := b.cur / 2
	return b.cur - half + rand.N(half+1)
}

// Reset makes the next delay Min again, after a success.
func (b *Backoff) Reset() { b.cur = 0 }

// Wait sleeps for the next delay. It returns false, at once, when done is closed first.
func (b *Backoff) Wait(done <-chan struct{}) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

// Policy bounds Do.
type Policy struct {
	// Try bounds each call of fn (0: only ctx bounds it). In a cluster a request to a group
	// that has no leader yet gets no answer; a bounded try lets the next one reach the new
	// leader.
	Try time.Duration
	// Attempts bounds the number of calls (0: until ctx ends).
	Attempts int
	// Backoff is the delay between calls.
	Backoff Backoff
}

// Do calls fn until it succeeds, fails with an error that is not Transient, the attempts are
// used up, or ctx ends; it returns fn's last error (or nil). fn must be idempotent.
func Do(ctx context.Context, p Policy, fn func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := try(ctx, p.Try, fn)
		if err == nil || !Transient(err) || ctx.Err() != nil || (p.Attempts > 0 && attempt >= p.Attempts) {
			return err
		}
		if !p.Backoff.Wait(ctx.Done()) {
			return err
		}
	}
}

func try(ctx context.Context, d time.Duration, fn func(ctx context.Context) error) error {
	if d <= 0 {
		return fn(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fn(ctx)
}

// Opaque returns err for a caller outside jetbus: the same text, without the dependency's
// error values (they are not part of jetbus's API), wrapping jetbus.ErrUnavailable when err is
// Transient and the context's error when err is one, so that callers can still tell "try
// again later" and "cancelled" apart with errors.Is. Opaque(nil) is nil.
func Opaque(err error) error {
	if err == nil {
		return nil
	}
	o := &opaque{msg: err.Error()}
	if Transient(err) {
		o.kinds = append(o.kinds, jetbus.ErrUnavailable)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded, jetbus.ErrClosed} {
		if errors.Is(err, c) {
			o.kinds = append(o.kinds, c)
		}
	}
	return o
}

type opaque struct {
	msg   string
	kinds []error
}

func (o *opaque) Error() string   { return o.msg }
func (o *opaque) Unwrap() []error { return o.kinds }
