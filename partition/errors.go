package partition

import (
	"errors"
	"fmt"

	"github.com/jetbus/jetbus"
)

// Sentinel errors of package partition. Calls wrap them with detail; compare with errors.Is.
// Bad topic and group names are reported with jetbus.ErrInvalidTopic and jetbus.ErrInvalidGroup,
// bad subscribe options with jetbus.ErrInvalidOption, a group no member ever joined with
// jetbus.ErrGroupNotFound.
var (
	// ErrInvalidConfig is returned by Config.Validate, Subscribe, Join and AcquireLease for a
	// setting out of range: a non-positive or too short TTL, negative replicas, a member ID
	// that is not a valid KV key token, a negative partition.
	// It wraps jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("partition: %w", jetbus.ErrInvalidConfig)
	// ErrTTLMismatch is returned by Subscribe and Join when the group's bucket already exists
	// with another TTL: every member of a group must use the same TTL.
	ErrTTLMismatch = errors.New("partition: group bucket exists with another TTL")
	// ErrAssignmentConflict is returned by Group.Advance when another member stored an
	// assignment since the one passed in was read.
	ErrAssignmentConflict = errors.New("partition: assignment changed meanwhile")
	// ErrLeaseHeld is returned by Lease.Acquire (TryAcquire) when another member holds the
	// lease.
	ErrLeaseHeld = errors.New("partition: lease held by another member")
	// ErrLeaseLost is returned by Lease.Renew when the lease was taken, released or expired
	// since this member last wrote it, and by Subscriber.Err when every partition was lost
	// for good. An owner that sees it stops the partition at once.
	ErrLeaseLost = errors.New("partition: lease lost")
	// ErrNoPartitions is returned by Subscribe when the topic reports fewer than one
	// partition.
	ErrNoPartitions = errors.New("partition: topic has no partitions")
)
