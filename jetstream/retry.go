package jetstream

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// apiTry bounds one JetStream API request made through withRetry. In a cluster, a request to a
// consumer that has no leader yet (just created, or its leader's server just stopped) gets no
// answer; asking again once the group elected a leader succeeds.
const apiTry = 2 * time.Second

// withRetry calls fn with a bounded context until it succeeds, fails with an error that
// retrying cannot fix, or ctx ends. fn must be idempotent.
func withRetry(ctx context.Context, fn func(ctx context.Context) error) error {
	wait := 20 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, apiTry)
		err := fn(tctx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func retryable(err error) bool {
	switch {
	case errors.Is(err, natsjs.ErrConsumerNotFound), errors.Is(err, natsjs.ErrStreamNotFound),
		errors.Is(err, natsjs.ErrConsumerInvalidReset), errors.Is(err, natsjs.ErrConsumerExists),
		errors.Is(err, natsjs.ErrConsumerNameAlreadyInUse), errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrConnectionClosed):
		return false
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 400 {
		return false // a bad request stays bad
	}
	return true
}
