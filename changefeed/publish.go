package changefeed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/schema"
)

// Publisher is what feeds and drainers need of the Bus: pipelined publishes (the
// jetbus.AsyncPublisher capability), and the JetStream context for their KV buckets.
// *jetstream.Bus has it; open it with the schema registry's publish middleware so that
// changes are validated against their topic's schema.
type Publisher interface {
	jetbus.AsyncPublisher
	JetStream() natsjs.JetStream
}

// DeadLetters keeps what feeds and drainers can never publish (the dead-letter role, named
// so in every component): a *dlq.Queue.
type DeadLetters interface {
	Reject(ctx context.Context, r dlq.Rejected) (uint64, error)
}

var _ DeadLetters = (*dlq.Queue)(nil)

// message is one event to publish.
type message struct {
	topic   string
	payload []byte
	id      string
	key     string
	ts      time.Time
	headers map[string]string
	opts    []jetbus.PublishOption // more options (the outbox's SID, tags, caused-by)
	// traceParent and traceState are the trace context the event continues (an outbox
	// document's), as given: the Bus validates them.
	traceParent, traceState string
	// change is the change the message was made from, if any: the dead letter of a message
	// too large to publish holds its summary instead of the payload.
	change *change
}

// sender publishes a runner's messages and dead-letters those that can never be published.
type sender struct {
	bus       Publisher
	dlq       DeadLetters // nil: a message that cannot be published stops the runner
	by        string      // the dead letters' group: "changefeed-<name>", "outbox-<name>"
	source    string      // their original subject: "changefeed.<name>", "outbox.<name>"
	templated bool        // topics come from a template: a missing topic is the message's fault
	log       *slog.Logger
}

// send publishes m asynchronously. When m can never be published (rejectable), it stores m
// in the DLQ instead and returns rejected; a nil future and a nil error then mean m is done.
// Any other error stops the runner, which starts again from its position.
func (s *sender) send(ctx context.Context, m *message) (fut jetbus.PublishFuture, rejected bool, err error) {
	opts := make([]jetbus.PublishOption, 0, 4+len(m.opts))
	opts = append(opts, jetbus.WithID(m.id), jetbus.WithKey(m.key))
	if !m.ts.IsZero() {
		opts = append(opts, jetbus.WithTS(m.ts))
	}
	if len(m.headers) > 0 {
		opts = append(opts, jetbus.WithHeaders(m.headers))
	}
	opts = append(opts, m.opts...)
	if m.traceParent != "" {
		opts = append(opts, jetbus.WithTraceContext(m.traceParent, m.traceState))
	}
	fut, err = s.bus.PublishAsync(ctx, m.topic, json.RawMessage(m.payload), opts...)
	if err == nil {
		return fut, false, nil
	}
	if !rejectable(err, s.templated) {
		return nil, false, err
	}
	if err := s.reject(ctx, m, err); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// sendSync publishes m and waits for the acknowledgement; dup reports that the server had the
// event already.
func (s *sender) sendSync(ctx context.Context, m *message) (dup, rejected bool, err error) {
	fut, rejected, err := s.send(ctx, m)
	if err != nil || rejected {
		return false, rejected, err
	}
	wctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if _, err := fut.Wait(wctx); err != nil {
		return false, false, err
	}
	return fut.Duplicate(), false, nil
}

// rejectable reports whether err says that the message itself can never be published, so
// that it goes to the DLQ and the runner continues: too large, refused by the topic's schema,
// a key or header that cannot travel, a templated topic that is not a valid name or does not
// exist. Everything else (a server unavailable, a stream deleted, an unknown error) stops the
// runner until it goes away: nothing is skipped.
func rejectable(err error, templated bool) bool {
	switch {
	case errors.Is(err, jetbus.ErrMessageTooLarge),
		errors.Is(err, schema.ErrInvalid),
		errors.Is(err, schema.ErrNoSchema),
		errors.Is(err, jetbus.ErrInvalidKey),
		errors.Is(err, jetbus.ErrInvalidHeader),
		errors.Is(err, jetbus.ErrInvalidPayload),
		errors.Is(err, jetbus.ErrInvalidOption):
		return true
	case errors.Is(err, jetbus.ErrInvalidTopic), errors.Is(err, jetbus.ErrTopicNotFound):
		return templated
	}
	return false
}

// reject stores m in the DLQ with reason changefeed.
func (s *sender) reject(ctx context.Context, m *message, cause error) error {
	if s.dlq == nil {
		return fmt.Errorf("changefeed: cannot publish key %s to %s and no DLQ is set: %w", strconv.Quote(m.key), m.topic, cause)
	}
	data := m.payload
	if errors.Is(cause, jetbus.ErrMessageTooLarge) && m.change != nil {
		data = summary(m.change, m.key, len(m.payload))
	}
	h := nats.Header{}
	h.Set(jetbus.HeaderContentType, jetbus.ContentTypeJSON)
	for k, v := range m.headers {
		// Only headers a publisher may set: a reserved one (x-dlq-…) from an outbox
		// document must not reach the dead letter.
		if jetbus.ValidateHeaderName(k) == nil && jetbus.ValidateHeaderValue(k, v) == nil {
			h.Set(k, v)
		}
	}
	if jetbus.ValidTraceParent(m.traceParent) { // its dead letter stays in its trace
		h.Set(jetbus.HeaderTraceParent, m.traceParent)
		if jetbus.ValidTraceState(m.traceState) {
			h.Set(jetbus.HeaderTraceState, m.traceState)
		}
	}
	key := m.key
	if jetbus.ValidateKey(key) != nil {
		key = "" // it cannot travel in a header; the error names it
	}
	r := dlq.Rejected{
		Topic:  m.topic,
		Source: s.source,
		By:     s.by,
		ID:     m.id,
		Key:    key,
		Header: h,
		Data:   data,
		Reason: dlq.ReasonChangefeed,
		Err:    fmt.Errorf("document key %s: %w", strconv.Quote(m.key), cause),
	}
	seq, err := s.dlq.Reject(ctx, r)
	if err != nil && len(data) > truncatedAbove {
		// Too large for the DLQ too (a document refused for another reason, its schema,
		// that is also over the server's max payload): a record of it instead, so that the
		// feed moves on rather than trying again for ever.
		r.Data = truncated(m, data)
		r.Err = fmt.Errorf("document key %s (%d bytes, kept as a record: sha256 and size): %w", strconv.Quote(m.key), len(data), cause)
		seq, err = s.dlq.Reject(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("changefeed: dead-letter key %s: %w", strconv.Quote(m.key), err)
	}
	s.log.Warn("change dead-lettered", "topic", m.topic, "key", m.key, "id", m.id, "dlq_seq", seq, "err", cause)
	return nil
}

// recovery publishes, after a failed publish, the messages that were in flight one at a
// time, and repairs per-key order: a message the server had already stored (duplicate) that
// follows, in the same key, a message it stores only now was stored out of order (an earlier
// publish was lost while a later one landed, as in a leader change); it is published again
// with the ID suffix "~r" so the key's last event is its latest.
type recovery struct {
	left  int
	fresh map[string]bool
}

func newRecovery(n int) *recovery {
	if n <= 0 {
		return nil
	}
	return &recovery{left: n, fresh: map[string]bool{}}
}

// active reports whether the next message is still in the recovery range.
func (r *recovery) active() bool { return r != nil && r.left > 0 }

// send publishes m synchronously with repair; dup and rejected as sendSync.
func (r *recovery) send(ctx context.Context, s *sender, m *message) (dup, rejected bool, err error) {
	r.left--
	dup, rejected, err = s.sendSync(ctx, m)
	if err != nil || rejected {
		return dup, rejected, err
	}
	if !dup {
		r.fresh[m.key] = true
		return false, false, nil
	}
	if r.fresh[m.key] {
		again := *m
		again.id = m.id + "~r"
		if _, _, err := s.sendSync(ctx, &again); err != nil {
			return true, false, err
		}
		s.log.Warn("re-published an event stored before an earlier event of its key", "topic", m.topic, "key", m.key, "id", again.id)
	}
	return true, false, nil
}

// truncatedAbove is the size past which a dead letter that the DLQ refused is stored as a
// record of the document instead (truncated).
const truncatedAbove = 64 << 10

// truncated is the record of a document too large to keep: the change's summary when there
// is one, or the size and SHA-256 of the body, with the start of it.
func truncated(m *message, data []byte) []byte {
	if m.change != nil {
		return summary(m.change, m.key, len(data))
	}
	sum := sha256.Sum256(data)
	b := []byte(`{"truncated":true,"size":`)
	b = strconv.AppendInt(b, int64(len(data)), 10)
	b = append(b, `,"sha256":"`...)
	b = append(b, hex.EncodeToString(sum[:])...)
	b = append(b, `","key":`...)
	b = appendString(b, m.key)
	return append(b, '}')
}
