package projection

import (
	"errors"
	"fmt"

	"github.com/jetbus/jetbus"
)

// Sentinel errors of package projection. Calls wrap them with detail; compare with errors.Is.
// Bad topic and group names are reported with jetbus.ErrInvalidTopic and
// jetbus.ErrInvalidGroup; a closed Bus or connection with jetbus.ErrClosed; MongoDB or NATS
// failures that may pass with jetbus.ErrUnavailable (their own errors are described, not
// wrapped).
var (
	// ErrInvalidConfig is returned by Config.Validate, NewChangelog, NewTransactional and
	// Rebuild for a Config field out of range; the message names the field. It wraps
	// jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("projection: %w", jetbus.ErrInvalidConfig)
	// ErrFenced is what a transactional projection's commit fails with when the partition's
	// checkpoint is no longer the one the batch started from: another owner committed since
	// (this one is a zombie that lost its lease). Nothing of the batch took effect. The
	// projection handles it itself (it reloads the checkpoint and skips what the other owner
	// applied); it is exported for tests and logs.
	ErrFenced = errors.New("projection: checkpoint moved: another owner committed this partition")
	// ErrRebuildRunning is returned by Rebuild when another rebuild of the same projection
	// holds the rebuild lock in jetbus_projections.
	ErrRebuildRunning = errors.New("projection: another rebuild of this projection is running")
	// ErrGenerationMoved is returned by Rebuild when the live generation changed while it
	// built the next one (another rebuild switched first); nothing was switched.
	ErrGenerationMoved = errors.New("projection: the live generation changed during the rebuild")
)

// DataError is the error a projection dead-letters an event with when the event cannot be
// applied to its view: a payload of the wrong shape for the mode, a field name MongoDB
// refuses, a document too large, a clash on a secondary unique index. It describes the event,
// never the batch: the rest of the batch is applied.
type DataError struct {
	// Code is MongoDB's error code when MongoDB refused the write, 0 when the projection
	// refused the event before writing.
	Code int
	// Msg says what is wrong.
	Msg string
}

func (e *DataError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("projection: MongoDB refused the write (code %d): %s", e.Code, e.Msg)
	}
	return "projection: " + e.Msg
}

func dataErrorf(format string, args ...any) *DataError {
	return &DataError{Msg: fmt.Sprintf(format, args...)}
}
