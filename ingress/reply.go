package ingress

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/schema"
)

// Code is the stable code of a refusal: in the reply's error object, first in a dead
// letter's x-dlq-error, and a label of ingress_rejected_total.
type Code string

// Refusal codes. Clients may rely on them; the messages that go with them are for people.
const (
	// CodeBadTopic: the subject is not "in.<topic>" with a valid topic name, or the topic
	// has no stream.
	CodeBadTopic Code = "bad_topic"
	// CodeNotAllowed: the topic is not in the configuration's allow list, or the request's
	// reply subject is not an inbox (Config.ReplyPrefixes).
	CodeNotAllowed Code = "not_allowed"
	// CodeNotJSON: the body is not one valid JSON value, or nests deeper than
	// jetbus.MaxJSONDepth levels.
	CodeNotJSON Code = "not_json"
	// CodeTooLarge: the body exceeds Config.MaxMessageSize, the headers exceed
	// MaxHeaderBytes (JetStream stores at most 64 KiB of headers), or the event with its
	// headers would exceed the server's max payload.
	CodeTooLarge Code = "too_large"
	// CodeSchema: the payload does not validate against the topic's schema (details list
	// every violation's JSON pointer), names a schema version that is not live, or the
	// registry is strict and the topic has none.
	CodeSchema Code = "schema"
	// CodeReservedHeader: a header the Bus would refuse or ingress does not forward: a
	// reserved prefix (x-dlq-, x-jetbus-), a custom name that is not x-[a-z0-9-]+, a NATS or
	// JetStream directive (Nats-* other than Nats-Msg-Id), a value with a control character,
	// a bad x-ts (not Unix ms, or further than Config.TSWindow from the clock), an empty element in x-tags or x-caused-by, a key or Nats-Msg-Id longer than
	// 1024 bytes, a Nats-Msg-Id with a prefix jetbus derives IDs from
	// (jetbus.ReservedIDPrefixes: replay:, dlq:), or a header given twice.
	CodeReservedHeader Code = "reserved_header"
	// CodeUnavailable: JetStream did not store the event (unreachable, no leader, no
	// acknowledgement in time, ingress stopping). Retry later; details.id, when present, is
	// the event ID to retry with as Nats-Msg-Id, since the event may have been stored.
	CodeUnavailable Code = "unavailable"
)

// Codes lists every code, in a fixed order.
var Codes = []Code{CodeBadTopic, CodeNotAllowed, CodeNotJSON, CodeTooLarge, CodeSchema, CodeReservedHeader, CodeUnavailable}

// Status returns the HTTP-like number ingress puts in the Nats-Service-Error-Code header for
// c, as NATS service clients expect a number there (400, 403, 413, 422, 503).
func (c Code) Status() int {
	switch c {
	case CodeNotAllowed:
		return 403
	case CodeTooLarge:
		return 413
	case CodeSchema:
		return 422
	case CodeUnavailable:
		return 503
	default:
		return 400
	}
}

func (c Code) index() int {
	for i, k := range Codes {
		if k == c {
			return i
		}
	}
	return len(Codes) - 1
}

// Reply is the body of the reply to a stored event.
type Reply struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	// Duplicate is true when JetStream already held an event with this ID (the client's
	// Nats-Msg-Id) within the topic's duplicate window: nothing new was stored, and Seq is
	// the stored event's.
	Duplicate bool `json:"duplicate"`
}

// ErrorReply is the body of the reply to a refused message.
type ErrorReply struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says why a message was refused.
type ErrorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Details is an object, empty when there is nothing more to say: "topic", "header",
	// "size" and "max", "violations" (schema: pointer, keyword, message each), "id"
	// (unavailable: the event ID to retry with).
	Details map[string]any `json:"details"`
}

// refusal is a message ingress will not store, with the reason to tell the client.
type refusal struct {
	code    Code
	msg     string
	details map[string]any
}

// Error is the code, then the message: "too_large: payload of …". A message that already
// begins with its code (a schema error's "schema: payload does not validate …") keeps it once.
func (r *refusal) Error() string {
	if p := string(r.code) + ": "; !strings.HasPrefix(r.msg, p) {
		return p + r.msg
	}
	return r.msg
}

func refuse(code Code, details map[string]any, format string, args ...any) *refusal {
	if details == nil {
		details = map[string]any{}
	}
	return &refusal{code: code, msg: fmt.Sprintf(format, args...), details: details}
}

// refusalOf maps an error of the publish path (the Bus and its schema middleware) to a
// refusal. Anything it does not recognise as the client's fault is CodeUnavailable.
func refusalOf(err error) *refusal {
	var ve *schema.ValidationError
	switch {
	case errors.As(err, &ve):
		return refuse(CodeSchema, map[string]any{"topic": ve.Topic, "version": ve.Version, "violations": ve.Failures},
			"%s", err)
	case errors.Is(err, schema.ErrInvalid), errors.Is(err, schema.ErrNoSchema), errors.Is(err, schema.ErrUnknownVersion):
		return refuse(CodeSchema, nil, "%s", err)
	case errors.Is(err, jetbus.ErrInvalidTopic), errors.Is(err, jetbus.ErrTopicNotFound):
		return refuse(CodeBadTopic, nil, "%s", err)
	case errors.Is(err, jetbus.ErrMessageTooLarge):
		return refuse(CodeTooLarge, nil, "%s", err)
	case errors.Is(err, jetbus.ErrInvalidPayload):
		return refuse(CodeNotJSON, nil, "%s", err)
	case errors.Is(err, jetbus.ErrInvalidHeader), errors.Is(err, jetbus.ErrInvalidKey), errors.Is(err, jetbus.ErrInvalidOption):
		return refuse(CodeReservedHeader, nil, "%s", err)
	}
	return refuse(CodeUnavailable, nil, "%s", err)
}

// replyOK encodes the reply to a stored event.
func replyOK(e *jetbus.Event, dup bool) []byte {
	b, _ := json.Marshal(Reply{ID: e.ID, Topic: e.Topic, Partition: e.Partition, Seq: e.Seq, Duplicate: dup})
	return b
}

// replyError builds the reply to a refused message: the JSON error object, and the NATS
// service error headers (Nats-Service-Error: "<code>: <message>", Nats-Service-Error-Code:
// the code's Status).
func replyError(subject string, r *refusal) *nats.Msg {
	b, err := json.Marshal(ErrorReply{Error: ErrorBody{Code: r.code, Message: r.msg, Details: r.details}})
	if err != nil { // details hold only strings, numbers and schema failures
		b, _ = json.Marshal(ErrorReply{Error: ErrorBody{Code: r.code, Message: r.msg, Details: map[string]any{}}})
	}
	return &nats.Msg{
		Subject: subject,
		Data:    b,
		Header: nats.Header{
			micro.ErrorHeader:     {oneLine(r.Error())},
			micro.ErrorCodeHeader: {strconv.Itoa(r.code.Status())},
		},
	}
}

// oneLine keeps a header value on one line and bounded.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	if len(b) > 1024 {
		b = b[:1024]
	}
	return string(b)
}
