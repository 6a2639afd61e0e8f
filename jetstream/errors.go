package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// Sentinel errors of package jetstream. The Bus's calls return the root package's sentinels
// (jetbus.ErrInvalidTopic, jetbus.ErrTopicNotFound, jetbus.ErrUnavailable, …); these are the
// package's own.
var (
	// ErrInvalidConfig is returned by TopicConfig.Validate and EnsureTopic for a field out of
	// range, and by EnsureTopic for a partition count lower than the topic's. It wraps
	// jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("jetstream: %w", jetbus.ErrInvalidConfig)
)

// errDeliveryGap ends a pinned pull whose delivery's consumer sequence is not the last one
// plus one (checkSequence): deliveries were lost in flight, or the consumer was reset behind
// this client's back.
var errDeliveryGap = errors.New("jetbus: deliveries lost in flight")

// apiPolicy bounds JetStream API requests that the Bus retries (consumer resets, resumes,
// unpins). In a cluster, a request to a consumer that has no leader yet (just created, or its
// leader's server just stopped) gets no answer; asking again once the group elected a leader
// succeeds.
var apiPolicy = retry.Policy{Try: 2 * time.Second, Backoff: retry.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}}

// lookupPolicy bounds a topic's stream lookup: like apiPolicy, but it gives up after a few
// tries (about 20s at most) so that a publish to an unreachable cluster fails rather than
// waiting as long as its context allows.
var lookupPolicy = retry.Policy{Try: 2 * time.Second, Attempts: 8, Backoff: retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}}

// untilEnd says, in an error, that a request was retried until ctx ended (when it did).
func untilEnd(ctx context.Context) string {
	if ctx.Err() != nil {
		return " (asked again until the context ended)"
	}
	return ""
}

// warnRetry logs a transient failure that the caller asks again after: a JetStream that
// never answers (down, or a permission the user lacks, which NATS reports as a timeout)
// is then seen in the log while the call waits, not only when its context ends.
func warnRetry(log *slog.Logger, what string, err error) {
	if err != nil && retry.Transient(err) {
		log.Warn(what+": asking again", "err", err)
	}
}
