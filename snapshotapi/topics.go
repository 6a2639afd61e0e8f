package snapshotapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// TopicScope is the scope entry (in Token.Views or a JWT's scope claim) that lets a token
// read the keys of topic: "topic:<name>". "*" reads every view and topic.
func TopicScope(topic string) string { return "topic:" + topic }

// topicRender changes whenever the JSON rendering of a key's event changes.
const topicRender = "t1"

// keyEvent is the body of GET /v1/topics/{topic}/keys/{key}: the key's event.
type keyEvent struct {
	Topic     string         `json:"topic"`
	Key       string         `json:"key"`
	ID        string         `json:"id"`
	Partition int            `json:"partition"`
	Seq       uint64         `json:"seq"`
	TS        string         `json:"ts"`
	Payload   jsonRawMessage `json:"payload"`
}

// getTopicKey serves GET and HEAD /v1/topics/{topic}/keys/{key}: the last event of a key of
// a keyed topic, or with ?at=T the last one the stream stored at or before T.
func (s *Server) getTopicKey(c echo.Context) error {
	p, e := s.auth.authenticate(c.Request())
	if e != nil {
		return e
	}
	topic, e := pathParam(c, "topic")
	if e != nil {
		return e
	}
	if !s.topics[topic] {
		served := []string{}
		for _, t := range s.cfg.Topics {
			if s.auth.open || p.may(TopicScope(t)) { // an error names only what the scope may see
				served = append(served, t)
			}
		}
		return newError(http.StatusNotFound, CodeUnknownTopic, "no topic %q is served", printable(topic)).with("topics", served)
	}
	if !s.auth.open && !p.may(TopicScope(topic)) {
		return newError(http.StatusForbidden, CodeForbidden, "the token may not read topic %s", topic).
			with("topic", topic).withHeader("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+TopicScope(topic)+`"`)
	}
	key, e := pathKey(c)
	if e != nil {
		return e
	}
	r := c.Request()
	params, e := splitQuery(r.URL.RawQuery, s.cfg.MaxQueryBytes)
	if e != nil {
		return e
	}
	var at time.Time
	atSet := false
	for _, q := range params {
		if q.name != "at" {
			return badQuery(printable(q.name), "unknown parameter %q: a topic's key takes at", printable(q.name))
		}
		if atSet {
			return badQuery("at", "at is given twice")
		}
		t, err := parseTime(q.value)
		if err != nil {
			return badQuery("at", "at is an RFC 3339 time or Unix milliseconds: %s", err.Error())
		}
		at, atSet = t, true
	}
	if e := checkValidators(r.Header); e != nil {
		return e
	}
	ctx := ctxOf(c)
	var ev *jetbus.Event
	var err error
	if atSet {
		ev, err = s.keys.At(ctx, topic, key, at)
	} else {
		var m map[string]*jetbus.Event
		if m, err = s.keys.Latest(ctx, topic, key); err == nil {
			ev = m[key]
		}
	}
	when := ""
	if atSet {
		when = " at " + at.UTC().Format(time.RFC3339Nano)
	}
	switch {
	case err == nil && ev == nil, errors.Is(err, jetbus.ErrEventNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "topic %s holds no event of key %q%s", topic, printable(key), when).with("key", key)
	case err != nil:
		return s.keyReadError(ctx, topic, err)
	case !json.Valid(ev.Payload):
		return newError(http.StatusUnprocessableEntity, CodeNotJSON, "the event of key %q of topic %s (seq %d) has a body that is not JSON: read it from the stream", printable(key), topic, ev.Seq).
			with("key", key).with("seq", ev.Seq)
	case ev.Tombstone():
		return newError(http.StatusNotFound, CodeNotFound, "key %q of topic %s was deleted%s (a tombstone, seq %d)", printable(key), topic, when, ev.Seq).
			with("key", key).with("seq", ev.Seq)
	}
	gz := acceptsGzip(r)
	h := c.Response().Header()
	cacheHeaders(h, noCache)
	val := validators{etag: keyETag(int64(ev.Seq), topicRender, gz), lastMod: ev.TS}
	h.Set("ETag", val.etag)
	if stop, err := s.conditional(c, routeTopicKey, val); stop || err != nil {
		return err
	}
	if !ev.TS.IsZero() {
		h.Set("Last-Modified", ev.TS.UTC().Format(http.TimeFormat))
	}
	return c.JSON(http.StatusOK, keyEvent{Topic: topic, Key: key, ID: ev.ID, Partition: ev.Partition, Seq: ev.Seq,
		TS: ev.TS.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Payload: jsonRawMessage(ev.Payload)})
}

// keyReadError maps a KeyReader error to the API's errors.
func (s *Server) keyReadError(ctx context.Context, topic string, err error) *apiError {
	switch {
	case errors.Is(err, jetbus.ErrNotKeyed):
		return newError(http.StatusUnprocessableEntity, CodeNotKeyed, "topic %s is not keyed: the stream keeps no per-key state to read (declare it keyed)", topic).with("topic", topic)
	case errors.Is(err, jetbus.ErrTopicNotFound):
		return newError(http.StatusNotFound, CodeUnknownTopic, "topic %s does not exist", topic).with("topic", topic)
	case errors.Is(err, jetbus.ErrInvalidKey):
		return newError(http.StatusBadRequest, CodeBadKey, "no event has this key")
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return newError(http.StatusServiceUnavailable, CodeTimeout, "the request ran out of time (%s)", s.cfg.RequestTimeout).withHeader("Retry-After", "1")
	}
	return newError(http.StatusServiceUnavailable, CodeUnavailable, "NATS is unavailable: %s", retry.Opaque(err)).withHeader("Retry-After", "1")
}

// jsonRawMessage is a payload written as it is; an empty one as null.
type jsonRawMessage []byte

func (m jsonRawMessage) MarshalJSON() ([]byte, error) {
	if len(m) == 0 {
		return []byte("null"), nil
	}
	return m, nil
}
