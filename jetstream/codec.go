package jetstream

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/tidwall/gjson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/jsonenc"
)

// encode builds the wire message of e for subject. Header values share one backing array:
// this runs for every publish.
func encode(e *jetbus.Event, subject string) *nats.Msg {
	n := 6 + len(e.Headers)
	if e.TraceParent != "" {
		n += 3
	}
	h := make(nats.Header, n)
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(jetbus.HeaderMsgID, e.ID)
	set(jetbus.HeaderTS, strconv.FormatInt(e.TS.UnixMilli(), 10))
	set(jetbus.HeaderContentType, jetbus.ContentTypeJSON)
	if e.Key != "" {
		set(jetbus.HeaderKey, e.Key)
	}
	if e.SID != "" {
		set(jetbus.HeaderSID, e.SID)
	}
	if len(e.CausedBy) > 0 {
		set(jetbus.HeaderCausedBy, strings.Join(e.CausedBy, ","))
	}
	if len(e.Tags) > 0 {
		set(jetbus.HeaderTags, strings.Join(e.Tags, ","))
	}
	if e.TraceParent != "" {
		set(jetbus.HeaderTraceParent, e.TraceParent)
		if e.TraceState != "" {
			set(jetbus.HeaderTraceState, e.TraceState)
		}
	}
	if e.Baggage != "" {
		set(jetbus.HeaderBaggage, e.Baggage)
	}
	for k, v := range e.Headers {
		set(k, v)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: e.Payload}
}

// headerSize approximates the encoded size of h as NATS sends it ("NATS/1.0\r\n", then
// "k: v\r\n" per value, then "\r\n").
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// decodeDelivery is decode for a delivered message (the consume path allocates the Event
// together with its Delivery). topic and partition are the consumer's: the subject need not
// be parsed.
func decodeDelivery(e *jetbus.Event, m natsjs.Msg, meta *natsjs.MsgMetadata, topic string, partition int, keepBaggage func(string) bool) (jetbus.RawMessage, traceDrops, error) {
	raw := jetbus.RawMessage{
		Subject: m.Subject(),
		Stream:  meta.Stream,
		Seq:     meta.Sequence.Stream,
		Header:  m.Headers(),
		Data:    m.Data(),
		Time:    meta.Timestamp,
	}
	drops, err := decode(e, &raw, topic, partition, keepBaggage)
	return raw, drops, err
}

// decode fills e with the event a stored message carries. A message published by a foreign
// client without jetbus headers still decodes: its ID is "<stream>:<seq>", its TS the time
// the stream stored it, and on a keyed topic its key the subject's key token. The returned
// error wraps jetbus.ErrDecode when the body is not valid JSON; the event is complete
// nonetheless.
//
// The trace context headers are kept only when valid (a malformed one is dropped and
// reported in the returned traceDrops, never an error) and the baggage only for the keys
// keepBaggage accepts (nil: none).
//
// This runs for every delivery: headers are looked up by name (the mapped ones), and the
// header map is walked only when it holds more than those and the trace context, for custom
// "x-" headers.
func decode(e *jetbus.Event, raw *jetbus.RawMessage, topic string, partition int, keepBaggage func(string) bool) (traceDrops, error) {
	h, data := nats.Header(raw.Header), raw.Data
	*e = jetbus.Event{
		Topic:     topic,
		Partition: partition,
		Payload:   json.RawMessage(data),
		Seq:       raw.Seq,
	}
	known := 0
	if v := h[jetbus.HeaderMsgID]; len(v) > 0 {
		e.ID = v[0]
		known++
	}
	if v := h[jetbus.HeaderKey]; len(v) > 0 {
		e.Key = v[0]
		known++
	}
	if v := h[jetbus.HeaderTS]; len(v) > 0 {
		if ms, ok := parseMillis(v[0]); ok {
			e.TS = time.UnixMilli(ms)
		}
		known++
	}
	if v := h[jetbus.HeaderSID]; len(v) > 0 {
		e.SID = v[0]
		known++
	}
	if v := h[jetbus.HeaderCausedBy]; len(v) > 0 {
		e.CausedBy = splitList(v[0])
		known++
	}
	if v := h[jetbus.HeaderTags]; len(v) > 0 {
		e.Tags = splitList(v[0])
		known++
	}
	if _, ok := h[jetbus.HeaderContentType]; ok {
		known++
	}
	if _, ok := h[pinHeader]; ok {
		known++
	}
	var drops traceDrops
	if len(h) > known {
		if v := h[jetbus.HeaderTraceParent]; len(v) > 0 {
			e.TraceParent = v[0]
			known++
		}
		if v := h[jetbus.HeaderTraceState]; len(v) > 0 {
			e.TraceState = v[0]
			known++
		}
		if v := h[jetbus.HeaderBaggage]; len(v) > 0 {
			e.Baggage = v[0]
			known++
		}
		drops = sanitizeTrace(e, keepBaggage)
	}
	if len(h) > known {
		for k, vs := range h {
			if len(vs) == 0 || !strings.HasPrefix(k, "x-") || jetbus.IsMappedHeader(k) {
				continue
			}
			if e.Headers == nil {
				e.Headers = make(map[string]string)
			}
			e.Headers[k] = vs[0]
		}
	}
	if e.Key == "" && hasKeyToken(raw.Subject, topic) {
		// A foreign client that published to a keyed topic's subject without x-key: the
		// subject's token is the key.
		if _, _, tok, ok := jetbus.ParseSubject(raw.Subject); ok && tok != "" {
			e.Key, _ = jetbus.ParseKeyToken(tok)
		}
	}
	if e.ID == "" {
		e.ID = raw.Stream + ":" + strconv.FormatUint(raw.Seq, 10)
	}
	if e.TS.IsZero() {
		e.TS = raw.Time
	}
	if !validJSON(data) {
		return drops, fmt.Errorf("%w: %s seq %d", jetbus.ErrDecode, raw.Stream, raw.Seq)
	}
	return drops, nil
}

// parseMillis reads an x-ts value as strconv.ParseInt(s, 10, 64) does, with a quicker path
// for what the Bus writes (up to 18 digits, no sign): it runs for every delivery.
func parseMillis(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		ms, err := strconv.ParseInt(s, 10, 64)
		return ms, err == nil
	}
	var ms int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			ms, err := strconv.ParseInt(s, 10, 64) // a sign, or not a number
			return ms, err == nil
		}
		ms = ms*10 + int64(c-'0')
	}
	return ms, true
}

// hasKeyToken reports whether subject, a delivery's subject of topic, may hold a key token
// after its partition (a keyed topic's "<topic>.p<n>.<token>"): only then is it parsed, a
// keyless event of a plain topic being common.
func hasKeyToken(subject, topic string) bool {
	rest, ok := strings.CutPrefix(subject, topic)
	return !ok || strings.Count(rest, ".") > 1
}

func splitList(v string) []string {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// foreignSeq parses an ID of the form "<stream>:<seq>" given to events that carried no ID.
func foreignSeq(stream, id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, stream+":")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil && seq > 0
}

// validJSON reports whether b is one valid JSON value (RFC 8259), as encoding/json.Valid does,
// nesting at most jetbus.MaxJSONDepth levels. It runs for every publish of a json.RawMessage
// and every delivery, so it uses gjson's validator, about three times faster than
// encoding/json's; FuzzValidJSON checks that the two agree. gjson recurses per level, so the
// depth is bounded first, by a scan that does not; a body of at most MaxJSONDepth bytes
// cannot nest deeper (each level takes a byte), and skips the scan.
func validJSON(b []byte) bool {
	return (len(b) <= jetbus.MaxJSONDepth || jsonenc.WithinDepth(b, jetbus.MaxJSONDepth)) && gjson.ValidBytes(b)
}

// pinHeader is the header the server adds to every delivery of a pinned consumer.
const pinHeader = "Nats-Pin-Id"
