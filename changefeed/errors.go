package changefeed

import (
	"errors"
	"fmt"

	"github.com/jetbus/jetbus"
)

// Sentinel errors of package changefeed. Calls wrap them with detail; compare with errors.Is.
// Bad topics are reported with jetbus.ErrInvalidTopic, bad publish options (AppendOutbox) with
// the root's sentinels (jetbus.ErrInvalidKey, jetbus.ErrInvalidHeader, …), and a dependency
// that may come back with jetbus.ErrUnavailable.
var (
	// ErrInvalidConfig is returned by Config.Validate, OutboxConfig.Validate, New and
	// NewDrainer for a field out of range, naming the field. It wraps
	// jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("changefeed: %w", jetbus.ErrInvalidConfig)
	// ErrHistoryLost is what a feed reports (Feed.Ready, Feed.Status, its log) when its saved
	// position is no longer in the oplog — MongoDB's ChangeStreamHistoryLost (286) or a
	// resume token the server refuses (InvalidResumeToken, 260) — and its policy is
	// HistoryFail: it publishes nothing until the saved position is reset.
	ErrHistoryLost = errors.New("changefeed: the saved position is no longer in the oplog")
	// ErrFeedFailed is what a feed reports (Feed.Ready) when MongoDB refused its change
	// stream for a reason that retrying at once cannot fix (a pipeline the server rejects, a
	// post-image required but not recorded). The feed tries again every FailedRetry.
	ErrFeedFailed = errors.New("changefeed: the change stream failed")
	// ErrInvalidOutbox is the cause recorded with an outbox document the drainer cannot
	// publish (no topic, a payload that is not JSON, headers that are not strings, …): the
	// document is dead-lettered, then removed from the outbox.
	ErrInvalidOutbox = errors.New("changefeed: invalid outbox document")
)
