package dlq

import (
	"errors"
	"fmt"

	"github.com/jetbus/jetbus"
)

var (
	// ErrNotFound is returned by Show for a sequence that holds no dead letter.
	ErrNotFound = errors.New("dlq: dead letter not found")
	// ErrDLQUnavailable wraps a failed dead-letter publish. The middleware returns it (not as
	// jetbus.Permanent) so the original event is delivered again.
	ErrDLQUnavailable = errors.New("dlq: dead-letter stream unavailable")
	// ErrInvalidFilter is returned for a filter with a bad topic, group or time range.
	ErrInvalidFilter = errors.New("dlq: invalid filter")
	// ErrInvalidConfig is returned by Config.Validate and Open for a Config field out of
	// range. It wraps jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("dlq: %w", jetbus.ErrInvalidConfig)
	// ErrNotReplayable is a Replay failure of one letter: a message ingress refused, for a
	// topic not open to ingress (ReplayOptions.IngressTopics, Force).
	ErrNotReplayable = errors.New("dlq: not replayable")
	// ErrTooManyFailures stops a replay whose failed letters are of more keys than it may
	// remember (MaxBlockedKeys): it could not hold back their later letters.
	ErrTooManyFailures = errors.New("dlq: replay stopped: too many keys failed")
)

// DeadLetteredError is what the middleware returns, wrapped in jetbus.Permanent, once an event
// is stored in the DLQ: the Bus then terminates the original.
type DeadLetteredError struct {
	Reason string
	Seq    uint64 // the dead letter's sequence in the DLQ stream
	Err    error  // the handler's error, if any
}

func (e *DeadLetteredError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("dead-lettered (%s) at DLQ seq %d", e.Reason, e.Seq)
	}
	return fmt.Sprintf("dead-lettered (%s) at DLQ seq %d: %v", e.Reason, e.Seq, e.Err)
}

func (e *DeadLetteredError) Unwrap() error { return e.Err }
