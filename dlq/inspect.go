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

// store is one stream of the DLQ, in the order scans read them.
type store struct {
	stream, prefix string
}

var stores = []store{{StreamName, SubjectPrefix}, {RejectsStreamName, RejectsSubjectPrefix}}

// storeIndex is the place of stream in stores, or -1.
func storeIndex(stream string) int {
	for i, s := range stores {
		if s.stream == stream {
			return i
		}
	}
	return -1
}

// openStores returns the DLQ's streams that exist, by name; the DLQ stream must.
func (q *Queue) openStores(ctx context.Context) (map[string]natsjs.Stream, error) {
	out := map[string]natsjs.Stream{}
	for _, st := range stores {
		s, err := q.js.Stream(ctx, st.stream)
		switch {
		case errors.Is(err, natsjs.ErrStreamNotFound) && st.stream == StreamName:
			return nil, fmt.Errorf("%w: %v", ErrDLQUnavailable, err)
		case errors.Is(err, natsjs.ErrStreamNotFound):
			continue
		case err != nil:
			return nil, fmt.Errorf("dlq: %w", retry.Opaque(err))
		}
		out[st.stream] = s
	}
	return out, nil
}

// List returns the dead letters matching f, oldest first, at most limit of them (0: all). It
// holds every letter it returns: for a DLQ of any size, use Each.
func (q *Queue) List(ctx context.Context, f Filter, limit int) ([]*Letter, error) {
	var out []*Letter
	err := q.Each(ctx, f, func(l *Letter) bool {
		out = append(out, l)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Count returns how many dead letters match f. It reads their headers only, a fetch at a
// time.
func (q *Queue) Count(ctx context.Context, f Filter) (int, error) {
	n := 0
	err := q.scan(ctx, f, true, nil, func(*Letter) bool { n++; return true })
	return n, err
}

// Each calls fn with every dead letter matching f, oldest first (the DLQ stream's, then the
// refusals'), until fn returns false. It reads each stream up to the last letter that stream
// held when Each reached it: letters stored in a stream while it is read (a replayed event
// that failed again) are left out, but refusals stored while the DLQ stream is read are
// included. It holds one fetch of letters at a time (at most 500 letters and 2 MiB, or one
// larger letter), whatever the size of the DLQ: a letter fn does not keep is garbage once fn
// returns.
func (q *Queue) Each(ctx context.Context, f Filter, fn func(*Letter) bool) error {
	return q.scan(ctx, f, false, nil, fn)
}

// Show returns the dead letter at sequence seq of the DLQ stream.
func (q *Queue) Show(ctx context.Context, seq uint64) (*Letter, error) {
	return q.ShowAt(ctx, Position{Stream: StreamName, Seq: seq})
}

// ShowAt returns the dead letter at p.
func (q *Queue) ShowAt(ctx context.Context, p Position) (*Letter, error) {
	if storeIndex(p.Stream) < 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, p)
	}
	s, err := q.js.Stream(ctx, p.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, p)
	} else if err != nil {
		return nil, fmt.Errorf("dlq: show %s: %w", p, retry.Opaque(err))
	}
	m, err := s.GetMsg(ctx, p.Seq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: seq %s", ErrNotFound, p)
	} else if err != nil {
		return nil, fmt.Errorf("dlq: show %s: %w", p, retry.Opaque(err))
	}
	return parseLetter(p.Stream, m.Sequence, m.Subject, m.Header, m.Data)
}

// scan calls fn for every dead letter matching f, oldest first, store after store, until fn
// returns false; with headersOnly the letters have no Body. It reads each stream up to the
// last letter it held when its scan started: letters stored meanwhile (a replayed event that
// failed again) are left for the next scan. onStore, if set, is told at the first message of
// each stream how many messages of the filter's subjects the stream holds from there: an
// upper bound of the letters fn will see.
func (q *Queue) scan(ctx context.Context, f Filter, headersOnly bool, onStore func(uint64), fn func(*Letter) bool) error {
	if err := f.validate(); err != nil {
		return err
	}
	from := 0
	if f.From != (Position{}) {
		from = storeIndex(f.From.Stream)
	}
	for i := from; i < len(stores); i++ {
		st := stores[i]
		s, err := q.js.Stream(ctx, st.stream)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			if st.stream == StreamName {
				return fmt.Errorf("%w: %v", ErrDLQUnavailable, err)
			}
			continue
		} else if err != nil {
			return fmt.Errorf("dlq: %w", retry.Opaque(err))
		}
		last := s.CachedInfo().State.LastSeq
		cfg := natsjs.OrderedConsumerConfig{FilterSubjects: f.subjects(st.prefix), HeadersOnly: headersOnly}
		switch {
		case i == from && f.From.Seq > 0:
			cfg.DeliverPolicy = natsjs.DeliverByStartSequencePolicy
			cfg.OptStartSeq = f.From.Seq
		case !f.Since.IsZero():
			// Stored no earlier than dead-lettered, give or take the producers' clocks.
			start := f.Since.Add(-time.Minute)
			cfg.DeliverPolicy = natsjs.DeliverByStartTimePolicy
			cfg.OptStartTime = &start
		}
		if last == 0 || cfg.OptStartSeq > last {
			continue
		}
		stop, first := false, true
		err = streamscan.Scan(ctx, q.js, st.stream, cfg, func(m natsjs.Msg, meta *natsjs.MsgMetadata) bool {
			if meta.Sequence.Stream > last {
				return false
			}
			if first && onStore != nil {
				onStore(1 + min(meta.NumPending, last-meta.Sequence.Stream))
			}
			first = false
			data := m.Data()
			if headersOnly {
				data = nil
			}
			l, err := parseLetter(st.stream, meta.Sequence.Stream, m.Subject(), m.Headers(), data)
			if err != nil || !f.match(l) {
				return true // not a dead letter of this filter
			}
			if !fn(l) {
				stop = true
				return false
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("dlq: %w", retry.Opaque(err))
		}
		if stop {
			return nil
		}
	}
	return nil
}
