package changefeed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/spans"
)

// Fields of an outbox document: {_id: event ID, topic, key, payload, headers, ts}, and sid,
// caused_by, tags, traceparent and tracestate when set. A drainer sets sent (mark mode).
const (
	OutboxID       = "_id"
	OutboxTopic    = "topic"
	OutboxKey      = "key"
	OutboxPayload  = "payload"
	OutboxHeaders  = "headers"
	OutboxTS       = "ts"
	OutboxSID      = "sid"
	OutboxCausedBy = "caused_by"
	OutboxTags     = "tags"
	// OutboxTraceParent and OutboxTraceState are the W3C trace context the event continues
	// (strings, as the headers of the same names: docs/wire.md, "Trace context"): the
	// drainer's publish span is a child of it, and the event carries the trace ID. A value
	// that is not a string, or not valid, is ignored, never an error.
	OutboxTraceParent = "traceparent"
	OutboxTraceState  = "tracestate"
	OutboxSent        = "sent"
)

// AppendOutbox writes an event for topic into the outbox collection coll, for a drainer to
// publish. Call it with the context of the application's MongoDB transaction (the ctx that
// session.WithTransaction passes to its callback): the event is published if and only if the
// transaction commits, exactly once per committed transaction.
//
// The document is {_id: event ID, topic, key, payload, headers, ts} (and sid, caused_by,
// tags, traceparent and tracestate when set): payload is the JSON text of payload
// (marshaled with encoding/json; a json.RawMessage as is, after a validity check; nil is a
// tombstone), ts the event time in milliseconds. The options are the Bus's publish options
// (jetbus.WithKey, WithID, WithHeaders, WithTS, WithSID, WithCausedBy, WithTags,
// WithTraceContext) and are checked as Publish checks them; without WithID the event ID is
// a fresh UUIDv7. The trace context is ctx's span's, as Publish takes it, else
// WithTraceContext's when valid (a malformed one is left out, never an error): the event
// the drainer publishes continues that trace. It returns the event as it will be published
// (without partition, sequence and the drainer's own span).
//
// A bad topic, option or payload is refused with the root's sentinels
// (jetbus.ErrInvalidTopic, jetbus.ErrInvalidKey, jetbus.ErrInvalidHeader,
// jetbus.ErrInvalidOption, jetbus.ErrInvalidPayload) and nothing is written. A MongoDB error
// is returned wrapped, as the driver made it, so that session.WithTransaction can retry a
// TransientTransactionError.
func AppendOutbox(ctx context.Context, coll *mongo.Collection, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error) {
	if coll == nil {
		return nil, fmt.Errorf("%w: nil outbox collection", jetbus.ErrInvalidOption)
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	o, err := jetbus.ApplyPublishOptions(opts...)
	if err != nil {
		return nil, err
	}
	body, err := marshalPayload(payload)
	if err != nil {
		return nil, err
	}
	ev := &jetbus.Event{ID: o.ID, Topic: topic, Key: o.Key, TS: o.TS, SID: o.SID, Headers: o.Headers,
		Payload: body, CausedBy: o.CausedBy, Tags: o.Tags}
	if !spans.Inject(ctx, ev) && jetbus.ValidTraceParent(o.TraceParent) {
		ev.TraceParent = o.TraceParent
		if jetbus.ValidTraceState(o.TraceState) {
			ev.TraceState = o.TraceState
		}
	}
	if ev.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("changefeed: event ID: %w", err)
		}
		ev.ID = id.String()
	}
	if ev.TS.IsZero() {
		ev.TS = time.Now()
	}
	ev.TS = time.UnixMilli(ev.TS.UnixMilli())
	doc := bson.D{
		{Key: OutboxID, Value: ev.ID},
		{Key: OutboxTopic, Value: topic},
		{Key: OutboxKey, Value: ev.Key},
		{Key: OutboxPayload, Value: string(body)},
		{Key: OutboxTS, Value: bson.NewDateTimeFromTime(ev.TS)},
	}
	if len(ev.Headers) > 0 {
		names := make([]string, 0, len(ev.Headers))
		for k := range ev.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		h := make(bson.D, 0, len(names))
		for _, k := range names {
			h = append(h, bson.E{Key: k, Value: ev.Headers[k]})
		}
		doc = append(doc, bson.E{Key: OutboxHeaders, Value: h})
	}
	if ev.SID != "" {
		doc = append(doc, bson.E{Key: OutboxSID, Value: ev.SID})
	}
	if len(ev.CausedBy) > 0 {
		doc = append(doc, bson.E{Key: OutboxCausedBy, Value: ev.CausedBy})
	}
	if len(ev.Tags) > 0 {
		doc = append(doc, bson.E{Key: OutboxTags, Value: ev.Tags})
	}
	if ev.TraceParent != "" {
		doc = append(doc, bson.E{Key: OutboxTraceParent, Value: ev.TraceParent})
		if ev.TraceState != "" {
			doc = append(doc, bson.E{Key: OutboxTraceState, Value: ev.TraceState})
		}
	}
	if _, err := coll.InsertOne(ctx, doc); err != nil {
		return nil, fmt.Errorf("changefeed: append to outbox %s: %w", coll.Name(), err)
	}
	return ev, nil
}

// marshalPayload is the Bus's rule: a json.RawMessage as is if valid, nil as null, anything
// else through encoding/json.
func marshalPayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case json.RawMessage:
		if !json.Valid(p) {
			return nil, fmt.Errorf("%w: raw message is not valid JSON", jetbus.ErrInvalidPayload)
		}
		return bytes.TrimSpace(p), nil
	case nil:
		return json.RawMessage("null"), nil
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetbus.ErrInvalidPayload, err)
	}
	return b, nil
}

// outboxID is the event ID of an outbox document's _id: a string as it is — the ID the
// application chose (AppendOutbox writes it, WithID sets it), never quoted as Key quotes a
// string that looks like a number or an ObjectId's hex — and any other type as Key writes
// it (an ObjectId as its hex). The ID names the event for JetStream's deduplication, it
// does not key a view: a string _id equal to an ObjectId _id's hex names the same event.
func outboxID(v bson.RawValue) (string, error) {
	if v.Type == bson.TypeString {
		s, ok := v.StringValueOK()
		if !ok {
			return "", errBadBSON(v)
		}
		return s, nil
	}
	return Key(v)
}

// outboxMessage reads an outbox document into the message to publish. A document it cannot
// read is reported with an error wrapping ErrInvalidOutbox, with what can be read of it (ID,
// topic, key, the document as JSON) in the message for its dead letter.
func outboxMessage(raw bson.Raw) (*message, error) {
	m := &message{}
	id, err := outboxID(raw.Lookup(OutboxID))
	if err != nil || id == "" {
		return m, fmt.Errorf("%w: _id is missing or empty", ErrInvalidOutbox)
	}
	m.id = id
	// The trace context, first, so that a dead letter of the document keeps it too: a value
	// that is not a string is no trace context (left out, as the Bus leaves out a malformed
	// one); the Bus validates the strings.
	m.traceParent, _ = raw.Lookup(OutboxTraceParent).StringValueOK()
	m.traceState, _ = raw.Lookup(OutboxTraceState).StringValueOK()
	bad := func(format string, args ...any) (*message, error) {
		if m.payload == nil {
			m.payload, _ = appendDocJSON(nil, raw)
		}
		return m, fmt.Errorf("%w: %s: %s", ErrInvalidOutbox, id, fmt.Sprintf(format, args...))
	}
	var ok bool
	if m.topic, ok = raw.Lookup(OutboxTopic).StringValueOK(); !ok {
		return bad("topic is missing or not a string")
	}
	if k := raw.Lookup(OutboxKey); k.Type != 0 && k.Type != bson.TypeNull {
		if m.key, ok = k.StringValueOK(); !ok {
			return bad("key is not a string")
		}
	}
	switch p := raw.Lookup(OutboxPayload); p.Type {
	case 0:
		return bad("payload is missing")
	case bson.TypeString:
		m.payload = []byte(p.StringValue())
		if !json.Valid(m.payload) {
			return bad("payload is a string that is not JSON")
		}
	default:
		if m.payload, err = appendJSON(nil, p); err != nil {
			return bad("payload: %v", err)
		}
	}
	if t, ok := raw.Lookup(OutboxTS).DateTimeOK(); ok {
		m.ts = time.UnixMilli(t)
	}
	if h := raw.Lookup(OutboxHeaders); h.Type != 0 && h.Type != bson.TypeNull {
		d, ok := h.DocumentOK()
		if !ok {
			return bad("headers is not a document")
		}
		elems, err := d.Elements()
		if err != nil {
			return bad("headers: %v", err)
		}
		m.headers = make(map[string]string, len(elems))
		for _, e := range elems {
			v, ok := e.Value().StringValueOK()
			if !ok {
				return bad("header %q is not a string", e.Key())
			}
			m.headers[e.Key()] = v
		}
	}
	if s := raw.Lookup(OutboxSID); s.Type != 0 && s.Type != bson.TypeNull {
		sid, ok := s.StringValueOK()
		if !ok {
			return bad("sid is not a string")
		}
		m.opts = append(m.opts, jetbus.WithSID(sid))
	}
	for _, f := range []struct {
		name string
		opt  func(...string) jetbus.PublishOption
	}{{OutboxCausedBy, jetbus.WithCausedBy}, {OutboxTags, jetbus.WithTags}} {
		v := raw.Lookup(f.name)
		if v.Type == 0 || v.Type == bson.TypeNull {
			continue
		}
		arr, ok := v.ArrayOK()
		if !ok {
			return bad("%s is not an array", f.name)
		}
		vals, err := arr.Values()
		if err != nil {
			return bad("%s: %v", f.name, err)
		}
		strs := make([]string, 0, len(vals))
		for _, x := range vals {
			s, ok := x.StringValueOK()
			if !ok {
				return bad("%s holds a value that is not a string", f.name)
			}
			strs = append(strs, s)
		}
		m.opts = append(m.opts, f.opt(strs...))
	}
	return m, nil
}
