package jetbus

import (
	"bytes"
	"encoding/json"
	"time"
)

// Event is one record on a topic.
//
// On the wire (docs/wire.md, "Publishing directly") the payload is the message body and the
// other fields travel in headers, so any NATS client can produce and read events.
type Event struct {
	// ID identifies the event (UUIDv7 by default). It is also the JetStream Nats-Msg-Id, so
	// a second publish with the same ID is dropped. An event published by a client that did
	// not set one has the ID "<stream>:<sequence>".
	ID string `json:"id"`
	// Topic is the logical topic, without the partition suffix.
	Topic string `json:"topic"`
	// Key orders and partitions events: events with the same key share a partition.
	Key string `json:"key,omitempty"`
	// Partition is the partition the event was written to.
	Partition int `json:"partition"`
	// TS is the event time (millisecond precision on the wire).
	TS time.Time `json:"ts"`
	// SID is the optional session or boot ID of the producer.
	SID string `json:"sid,omitempty"`
	// Headers holds custom headers. Their names match HeaderNamePattern ("x-" prefixed). The
	// headers jetbus maps to fields of Event (x-key, x-ts, x-sid, x-caused-by, x-tags) are not
	// repeated here.
	Headers map[string]string `json:"headers,omitempty"`
	// Payload is the JSON body. JSON null is a tombstone: it deletes the key's state in
	// changelog projections.
	Payload json.RawMessage `json:"payload"`
	// CausedBy lists the IDs of the events that caused this one.
	CausedBy []string `json:"caused_by,omitempty"`
	// Tags are free-form labels.
	Tags []string `json:"tags,omitempty"`
	// Seq is the stream sequence of the event: set on delivery and on a successful publish.
	Seq uint64 `json:"seq,omitempty"`
	// TraceParent and TraceState are the event's W3C trace context (the traceparent and
	// tracestate headers): the span that published it. Both are empty when the event has
	// none or its traceparent was malformed (dropped, never an error). A handler's context
	// carries this span as its parent when the Bus traces.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Baggage is the event's W3C baggage header, holding only the keys the Bus allows
	// (jetstream.WithBaggageKeys); empty when none are allowed.
	Baggage string `json:"baggage,omitempty"`
}

// TraceID returns the trace ID of the event's traceparent (32 lowercase hex digits), or "".
func (e *Event) TraceID() string { return TraceIDOf(e.TraceParent) }

// Tombstone reports whether the event's payload is JSON null.
func (e *Event) Tombstone() bool {
	return bytes.Equal(bytes.TrimSpace(e.Payload), []byte("null"))
}

// Header returns the custom header name, or "".
func (e *Event) Header(name string) string {
	if e.Headers == nil {
		return ""
	}
	return e.Headers[name]
}

// SetHeader sets a custom header. It does not validate the name; Publish does.
func (e *Event) SetHeader(name, value string) {
	if e.Headers == nil {
		e.Headers = make(map[string]string)
	}
	e.Headers[name] = value
}
