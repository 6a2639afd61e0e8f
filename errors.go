package jetbus

import (
	"errors"
	"fmt"
)

// Sentinel errors. Implementations wrap them with detail; compare with errors.Is.
var (
	// ErrInvalidTopic is returned by Publish, Subscribe and topic management for a name that
	// ValidateTopic refuses.
	ErrInvalidTopic = errors.New("jetbus: invalid topic name")
	// ErrInvalidGroup is returned by Subscribe, Ack, Nack and the cursor calls for a group name
	// that ValidateGroup refuses.
	ErrInvalidGroup = errors.New("jetbus: invalid group name")
	// ErrInvalidHeader is returned by Publish for a custom header whose name is not
	// "x-[a-z0-9-]+" or that is mapped to an Event field, and for a header value with a
	// control character.
	ErrInvalidHeader = errors.New("jetbus: invalid header")
	// ErrReservedHeader is returned by Publish for a custom header jetbus reserves for itself
	// (ReservedHeaderPrefixes: "x-dlq-", "x-jetbus-"). It wraps ErrInvalidHeader.
	ErrReservedHeader = fmt.Errorf("%w: reserved for jetbus", ErrInvalidHeader)
	// ErrNotKeyed is returned by the KeyReader calls that need a keyed topic (Latest, At,
	// Versions) for a plain one.
	ErrNotKeyed = errors.New("jetbus: topic is not keyed")
	// ErrInvalidKey is returned by Publish for a key longer than MaxKeyLength bytes or with a
	// control character.
	ErrInvalidKey = errors.New("jetbus: invalid key")
	// ErrInvalidPayload is returned by Publish when the payload does not marshal to JSON, or
	// is a json.RawMessage that is not valid JSON.
	ErrInvalidPayload = errors.New("jetbus: payload is not valid JSON")
	// ErrMessageTooLarge is returned by Publish when the message would exceed the server's
	// maximum payload. Nothing is published.
	ErrMessageTooLarge = errors.New("jetbus: message exceeds the server's max payload")
	// ErrTopicNotFound is returned by Publish, Subscribe and the cursor calls when the topic
	// has no stream. Create topics with the implementation's EnsureTopic.
	ErrTopicNotFound = errors.New("jetbus: topic not found")
	// ErrInvalidOption is returned for an option value out of range.
	ErrInvalidOption = errors.New("jetbus: invalid option")
	// ErrUnknownEvent is returned by Ack and Nack when no delivery of that event is pending
	// for the group in this process (already acknowledged, timed out, or never delivered).
	ErrUnknownEvent = errors.New("jetbus: no pending delivery for this event")
	// ErrEventNotFound is returned when a position names an event ID the topic does not hold.
	ErrEventNotFound = errors.New("jetbus: event not found")
	// ErrGroupNotFound is returned by Cursor when the group has never consumed the topic.
	ErrGroupNotFound = errors.New("jetbus: group not found")
	// ErrDecode marks a delivery whose body is not valid JSON. The Bus does not call the
	// handler for it: the innermost step returns Permanent(an error wrapping ErrDecode), so
	// the dead-letter step records it with reason "decode".
	ErrDecode = errors.New("jetbus: body is not valid JSON")
	// ErrClosed is returned by calls on a closed Bus, a stopped Subscription, and every other
	// closed jetbus handle (a schema registry, a partitioned subscriber whose connection
	// closed).
	ErrClosed = errors.New("jetbus: closed")
	// ErrInvalidConfig is wrapped by every package's ErrInvalidConfig: a Config field out of
	// range, reported by the Config's Validate with the field's name.
	ErrInvalidConfig = errors.New("jetbus: invalid configuration")
	// ErrUnavailable wraps a failure of a server jetbus depends on that may go away by itself
	// (no leader during an election, a timeout, a lost connection): the same call, made again
	// later, can succeed. The dependency's own error is described in the message, not
	// wrapped: it is not part of jetbus's API.
	ErrUnavailable = errors.New("jetbus: unavailable")
)

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return "permanent: " + p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent wraps err so that the Bus does not retry the event: it goes to the dead-letter
// step at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was made by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
