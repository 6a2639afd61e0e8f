package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/streamscan"
)

// List returns the dead letters matching f, oldest first, at most limit of them (0: all).
func (q *Queue) List(ctx context.Context, f Filter, limit int) ([]*Letter, error) {
	var out []*Letter
	err := q.scan(ctx, f, func(l *Letter) bool {
		out = append(out, l)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Count returns how many dead letters match f.
func (q *Queue) Count(ctx context.Context, f Filter) (int, error) {
	n := 0
	err := q.scan(ctx, f, func(*Letter) bool { n++; return true })
	return n, err
}

// Show returns the dead letter at DLQ sequence seq.
func (q *Queue) Show(ctx context.Context, seq uint64) (*Letter, error) {
	s, err := q.stream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: seq %d", ErrNotFound, seq)
	} else if err != nil {
		return nil, fmt.Errorf("dlq: show %d: %w", seq, retry.Opaque(err))
	}
	return parseLetter(m.Sequence, m.Subject, m.Header, m.Data)
}

// scan calls fn for every dead letter matching f, oldest first, until fn returns false.
func (q *Queue) scan(ctx context.Context, f Filter, fn func(*Letter) bool) error {
	if err := f.validate(); err != nil {
		return err
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{f.subject()}}
	if !f.Since.IsZero() {
		// Stored no earlier than dead-lettered, give or take the producers' clocks.
		start := f.Since.Add(-time.Minute)
		cfg.DeliverPolicy = natsjs.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	if _, err := q.stream(ctx); err != nil {
		return err
	}
	err := streamscan.Scan(ctx, q.js, StreamName, cfg, func(m natsjs.Msg, meta *natsjs.MsgMetadata) bool {
		l, err := parseLetter(meta.Sequence.Stream, m.Subject(), m.Headers(), m.Data())
		if err != nil || !f.match(l) {
			return true // not a dead letter of this filter
		}
		return fn(l)
	})
	if err != nil {
		return fmt.Errorf("dlq: %w", retry.Opaque(err))
	}
	return nil
}
