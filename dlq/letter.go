package dlq

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus"
)

// Letter is one dead letter.
type Letter struct {
	// Seq is the dead letter's sequence in its stream: with Stream, its identity (Position,
	// Show).
	Seq uint64
	// Stream is the stream that holds it: StreamName, or RejectsStreamName for a message
	// ingress refused.
	Stream string
	// Topic is the topic the event was consumed from.
	Topic    string
	Group    string
	Reason   string
	Error    string
	Attempts int
	// TS is when the event was dead-lettered.
	TS time.Time
	// The original message.
	OriginalSubject string
	OriginalStream  string
	OriginalSeq     uint64
	OriginalID      string
	Key             string
	Header          nats.Header
	Body            json.RawMessage
	// BodySize and BodySHA256 are set when Body is only the first bytes of the message (a
	// refusal cut to Config.Rejects.MaxBody): the whole body's size and its SHA-256 (hex).
	BodySize   int    `json:",omitempty"`
	BodySHA256 string `json:",omitempty"`
}

// Truncated reports whether Body is only the first bytes of the message's body: such a
// letter cannot be replayed.
func (l *Letter) Truncated() bool { return l.BodySHA256 != "" }

// MarshalJSON writes the letter with its body as JSON when the body is JSON, and otherwise
// (a body that was not JSON: reason "decode", or a refusal) as the string BodyText, so that
// every letter can be printed (`bridge dlq show`, `dlq list --json`).
func (l *Letter) MarshalJSON() ([]byte, error) {
	type plain Letter
	out := struct {
		*plain
		Body     json.RawMessage `json:"Body"`
		BodyText *string         `json:"BodyText,omitempty"`
	}{plain: (*plain)(l), Body: l.Body}
	if !json.Valid(l.Body) {
		text := string(l.Body)
		out.Body, out.BodyText = nil, &text
	}
	return json.Marshal(out)
}

// Position is where the letter is stored.
func (l *Letter) Position() Position { return Position{Stream: l.Stream, Seq: l.Seq} }

// Rejected reports whether the letter is a message refused before it reached its topic
// (Queue.Reject): it has no original stream.
func (l *Letter) Rejected() bool { return l.OriginalStream == "" }

// origin is a delivery to dead-letter, from the middleware or from the safety net.
type origin struct {
	topic, group   string
	subject        string
	stream         string
	seq            uint64
	id, key        string
	header         nats.Header
	data           []byte
	attempts       int
	reason, errMsg string
	// rejected: the message never reached a stream (Queue.Reject).
	rejected bool
	// refusal: a message ingress refused, kept in RejectsStreamName.
	refusal bool
	// bodySize and bodySHA256 describe the whole body of a refusal whose data was cut.
	bodySize   int
	bodySHA256 string
	unlisted   bool // a rejected message of a topic its rejecter does not serve
}

// msgID is the dead letter's Nats-Msg-Id: the same delivery moved twice is stored once, and
// the same rejected message (same ID) too. A rejected message's ID longer than msgIDIDMax
// bytes (a client's may have 1024) is written as "sha256:" and its SHA-256 in hex, so that
// every ID the server keeps in memory for the duplicate window is small.
func (o *origin) msgID() string {
	if o.rejected {
		id := o.id
		if len(id) > msgIDIDMax {
			id = "sha256:" + bodySHA256([]byte(id))
		}
		return "dlq:rejected:" + o.group + ":" + id
	}
	return "dlq:" + o.stream + ":" + strconv.FormatUint(o.seq, 10) + ":" + o.group
}

// msgIDIDMax bounds the message ID kept as is in a rejected message's Nats-Msg-Id. A longer
// one is hashed into 71 bytes ("sha256:<64 hex digits>"), which no ID of at most msgIDIDMax
// bytes can equal.
const msgIDIDMax = 64

// dlqSubject is the dead letter's subject: dlq.<topic>, or UnroutedSubject for a rejected
// message without a valid topic; dlq_rejects.<topic> and RejectsUnroutedSubject for ingress's
// refusals, and RejectsOtherSubject for a refusal of a topic ingress does not serve
// (Rejected.Unlisted), so that names clients invent make no subjects (the server keeps
// state per subject); its topic is in HeaderTopic.
func (o *origin) dlqSubject() string {
	prefix := SubjectPrefix
	if o.refusal {
		prefix = RejectsSubjectPrefix
	}
	switch {
	case o.rejected && jetbus.ValidateTopic(o.topic) != nil:
		return prefix + unrouted
	case o.otherSubject():
		return RejectsOtherSubject
	}
	return prefix + o.topic
}

// otherSubject reports whether o is filed under RejectsOtherSubject.
func (o *origin) otherSubject() bool {
	return o.refusal && o.unlisted && jetbus.ValidateTopic(o.topic) == nil
}

// rejectedID is a fresh ID for a rejected message that came without one.
func rejectedID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "rej-" + hex.EncodeToString(b[:])
}

func (o *origin) msg(now time.Time) *nats.Msg {
	h := make(nats.Header, len(o.header)+10)
	for k, v := range o.header {
		if strings.HasPrefix(k, "Nats-") {
			continue // the original's server directives and dedup ID do not apply to the DLQ
		}
		h[k] = append([]string(nil), v...)
	}
	h.Set(jetbus.HeaderMsgID, o.msgID())
	h.Set(HeaderReason, o.reason)
	h.Set(HeaderError, truncate(oneLine(o.errMsg), 1024))
	h.Set(HeaderGroup, o.group)
	h.Set(HeaderAttempts, strconv.Itoa(o.attempts))
	h.Set(HeaderOriginalSubject, o.subject)
	h.Set(HeaderOriginalStream, o.stream)
	h.Set(HeaderOriginalSeq, strconv.FormatUint(o.seq, 10))
	h.Set(HeaderOriginalID, o.id)
	h.Set(HeaderTS, strconv.FormatInt(now.UnixMilli(), 10))
	if o.key != "" {
		h.Set(jetbus.HeaderKey, o.key)
	}
	if o.otherSubject() {
		h.Set(HeaderTopic, o.topic)
	} else {
		h.Del(HeaderTopic) // a client's header of this name is not the DLQ's word
	}
	if o.bodySHA256 != "" {
		h.Set(HeaderBodySize, strconv.Itoa(o.bodySize))
		h.Set(HeaderBodySHA256, o.bodySHA256)
	} else {
		h.Del(HeaderBodySize) // a client's header of these names is not the DLQ's word
		h.Del(HeaderBodySHA256)
	}
	return &nats.Msg{Subject: o.dlqSubject(), Header: h, Data: o.data}
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// parseLetter reads a dead letter stored in stream at seq.
func parseLetter(stream string, seq uint64, subject string, h nats.Header, data []byte) (*Letter, error) {
	prefix := SubjectPrefix
	if stream == RejectsStreamName {
		prefix = RejectsSubjectPrefix
	}
	topic, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return nil, fmt.Errorf("dlq: %s is not a dead-letter subject", subject)
	}
	if t := h.Get(HeaderTopic); subject == RejectsOtherSubject && jetbus.ValidateTopic(t) == nil {
		topic = t
	}
	l := &Letter{
		Seq:             seq,
		Stream:          stream,
		Topic:           topic,
		Group:           h.Get(HeaderGroup),
		Reason:          h.Get(HeaderReason),
		Error:           h.Get(HeaderError),
		OriginalSubject: h.Get(HeaderOriginalSubject),
		OriginalStream:  h.Get(HeaderOriginalStream),
		OriginalID:      h.Get(HeaderOriginalID),
		Key:             h.Get(jetbus.HeaderKey),
		Header:          maps.Clone(h),
		Body:            json.RawMessage(data),
	}
	l.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	if sum := h.Get(HeaderBodySHA256); sum != "" {
		l.BodySHA256 = sum
		l.BodySize, _ = strconv.Atoi(h.Get(HeaderBodySize))
	}
	l.OriginalSeq, _ = strconv.ParseUint(h.Get(HeaderOriginalSeq), 10, 64)
	if ms, err := strconv.ParseInt(h.Get(HeaderTS), 10, 64); err == nil {
		l.TS = time.UnixMilli(ms)
	}
	return l, nil
}

// Filter selects dead letters; empty fields match everything.
type Filter struct {
	Topic  string
	Group  string
	Reason string
	Key    string
	// Since and Until bound the time the event was dead-lettered (Until exclusive).
	Since, Until time.Time
	// From skips the letters stored before it: a scan starts there (the DLQ stream's, then
	// the refusals'; a Position without a Stream is in StreamName). A replay that stopped
	// early says where to go on from (ReplayReport.Resume). The zero Position starts at the
	// oldest letter.
	From Position
}

func (f *Filter) validate() error {
	if f.Topic != "" {
		if err := jetbus.ValidateTopic(f.Topic); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidFilter, err)
		}
	}
	if f.Group != "" {
		if err := jetbus.ValidateGroup(f.Group); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidFilter, err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("%w: until %s is not after since %s", ErrInvalidFilter, f.Until, f.Since)
	}
	if f.From.Stream == "" && f.From.Seq > 0 {
		f.From.Stream = StreamName // a bare sequence is the DLQ stream's
	}
	if f.From != (Position{}) && storeIndex(f.From.Stream) < 0 {
		return fmt.Errorf("%w: from: %q is not a stream of the DLQ", ErrInvalidFilter, f.From.Stream)
	}
	return nil
}

// Position is where a dead letter is stored: a stream of the DLQ and a sequence in it.
type Position struct {
	Stream string
	Seq    uint64
}

// rejectsTag marks a position in RejectsStreamName.
const rejectsTag = "rejects:"

// String is the position as the bridge's dlq commands print and take it: the sequence alone
// in StreamName, "rejects:<seq>" in RejectsStreamName.
func (p Position) String() string {
	if p.Stream == RejectsStreamName {
		return rejectsTag + strconv.FormatUint(p.Seq, 10)
	}
	return strconv.FormatUint(p.Seq, 10)
}

// ParsePosition reads a Position as String writes it.
func ParsePosition(s string) (Position, error) {
	stream := StreamName
	if rest, ok := strings.CutPrefix(s, rejectsTag); ok {
		stream, s = RejectsStreamName, rest
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return Position{}, fmt.Errorf("%w: %q is not a position (a sequence number, or rejects:<seq>)", ErrInvalidFilter, s)
	}
	return Position{Stream: stream, Seq: seq}, nil
}

// subjects are the subject filters of the letters f selects in a stream whose subjects start
// with prefix: with a topic, its subject, and in RejectsStreamName RejectsOtherSubject too
// (where refusals of topics ingress does not serve are; match picks the topic's).
func (f *Filter) subjects(prefix string) []string {
	switch {
	case f.Topic == "":
		return []string{prefix + ">"}
	case prefix == RejectsSubjectPrefix:
		return []string{prefix + f.Topic, RejectsOtherSubject}
	}
	return []string{prefix + f.Topic}
}

func (f *Filter) match(l *Letter) bool {
	return (f.Topic == "" || f.Topic == l.Topic) &&
		(f.Group == "" || f.Group == l.Group) &&
		(f.Reason == "" || f.Reason == l.Reason) &&
		(f.Key == "" || f.Key == l.Key) &&
		(f.Since.IsZero() || !l.TS.Before(f.Since)) &&
		(f.Until.IsZero() || l.TS.Before(f.Until))
}
