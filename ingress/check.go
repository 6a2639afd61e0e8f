package ingress

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/jsonenc"
)

// MaxIDLength bounds a client's Nats-Msg-Id: JetStream keeps every ID of the duplicate window
// in memory.
const MaxIDLength = 1024

// jsMaxHeader is the largest encoded header block JetStream stores (its length is kept in 16
// bits): a larger one is refused by the stream, whoever retries it.
const jsMaxHeader = 1<<16 - 1

// MaxHeaderBytes bounds the headers ingress forwards (encoded as NATS does, "name: value\r\n"
// each), leaving room for those the Bus adds (x-ts, content-type, an event ID,
// x-schema-version) under JetStream's limit of 64 KiB; more is refused with CodeTooLarge.
const MaxHeaderBytes = jsMaxHeader - 1024

// check judges what a client sent to subject, before anything is published: the reply
// subject, the topic, the size and the headers. It returns the topic and the publish options
// the headers ask for, or why the message is refused. The JSON and the schema are checked by
// the publish path (the Bus and the registry's middleware).
func (g *Ingress) check(it *item) *refusal {
	// The client's ID first: a dead letter of a refused message keeps it whatever else is
	// wrong, so that a retry of the same message is kept once.
	if vals := it.header[jetbus.HeaderMsgID]; len(vals) == 1 && vals[0] != "" && len(vals[0]) <= MaxIDLength && controlChar(vals[0]) < 0 {
		it.clientID = vals[0]
	}
	if it.reply != "" && !g.replyAllowed(it.reply) {
		r := refuse(CodeNotAllowed, map[string]any{"reply": it.reply},
			"reply subject %q is not an inbox (allowed prefixes: %s): nothing was stored", it.reply, strings.Join(g.cfg.ReplyPrefixes, ", "))
		it.reply = "" // never publish to it
		return r
	}
	if err := jetbus.ValidateTopic(it.topic); err != nil {
		return refuse(CodeBadTopic, map[string]any{"topic": it.topic}, "subject %q: %v", it.subject, err)
	}
	if _, ok := g.topics[it.topic]; !ok {
		return refuse(CodeNotAllowed, map[string]any{"topic": it.topic}, "topic %q is not open to ingress", it.topic)
	}
	if len(it.data) > g.cfg.MaxMessageSize {
		return refuse(CodeTooLarge, map[string]any{"size": len(it.data), "max": g.cfg.MaxMessageSize},
			"payload of %d bytes exceeds the limit of %d", len(it.data), g.cfg.MaxMessageSize)
	}
	// Before any parser sees it: the schema's and the Bus's would recurse once per level.
	if !jsonenc.WithinDepth(it.data, jetbus.MaxJSONDepth) {
		return refuse(CodeNotJSON, map[string]any{"max_depth": jetbus.MaxJSONDepth},
			"the body nests deeper than %d levels", jetbus.MaxJSONDepth)
	}
	return g.headers(it)
}

func (g *Ingress) replyAllowed(reply string) bool {
	for _, p := range g.cfg.ReplyPrefixes {
		if strings.HasPrefix(reply, p) {
			return true
		}
	}
	return false
}

// headers turns the wire-contract headers into publish options. Headers outside the contract
// (content-type, anything not x-, Nats- or the trace context) are not forwarded. The trace
// context (traceparent, tracestate, baggage) is never a refusal: the Bus drops (and counts)
// what is malformed and keeps the rest, as it does for any publisher (docs/wire.md, "Trace
// context").
func (g *Ingress) headers(it *item) *refusal {
	h := it.header
	if len(h) == 0 {
		return nil
	}
	var custom map[string]string
	var traceParent, traceState, bag string
	size := 0 // of the headers forwarded
	for name, vals := range h {
		switch name {
		case jetbus.HeaderTraceParent, jetbus.HeaderTraceState, jetbus.HeaderBaggage:
			// Several tracestate or baggage headers are one list (W3C); several traceparents
			// make a value that is not one, dropped as malformed.
			v := strings.Join(vals, ",")
			switch name {
			case jetbus.HeaderTraceParent:
				traceParent = v
			case jetbus.HeaderTraceState:
				traceState = v
			default:
				bag = v
			}
			if len(v) <= traceHeaderMax(name) { // a longer one is dropped, never stored
				size += len(name) + len(v) + 4
			}
			continue
		}
		bad := func(format string, args ...any) *refusal {
			return refuse(CodeReservedHeader, map[string]any{"header": name}, "header "+name+": "+format, args...)
		}
		if len(vals) != 1 {
			return bad("given %d times", len(vals))
		}
		v := vals[0]
		if i := controlChar(v); i >= 0 {
			return bad("control character %q at byte %d", v[i], i)
		}
		if name != jetbus.HeaderContentType && (hasPrefixFold(name, "x-") || name == jetbus.HeaderMsgID) {
			size += len(name) + len(v) + 4
		}
		switch name {
		case jetbus.HeaderMsgID:
			if v == "" || len(v) > MaxIDLength {
				return bad("empty or longer than %d bytes", MaxIDLength)
			}
			if p, reserved := jetbus.ReservedID(v); reserved {
				return bad("IDs starting with %q are jetbus's own (DLQ replays and dead letters)", p)
			}
			it.opts = append(it.opts, jetbus.WithID(v))
		case jetbus.HeaderKey:
			if err := jetbus.ValidateKey(v); err != nil {
				return bad("%v", err)
			}
			it.opts = append(it.opts, jetbus.WithKey(v))
		case jetbus.HeaderTS:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return bad("%q is not Unix milliseconds", v)
			}
			if d := time.Until(time.UnixMilli(ms)); d > g.cfg.TSWindow || d < -g.cfg.TSWindow {
				return bad("%s is more than %s from the bridge's clock", time.UnixMilli(ms).UTC().Format(time.RFC3339), g.cfg.TSWindow)
			}
			it.opts = append(it.opts, jetbus.WithTS(time.UnixMilli(ms)))
		case jetbus.HeaderSID:
			it.opts = append(it.opts, jetbus.WithSID(v))
		case jetbus.HeaderCausedBy, jetbus.HeaderTags:
			parts := strings.Split(v, ",")
			for _, p := range parts {
				if p == "" {
					return bad("empty element in %q", v)
				}
			}
			if name == jetbus.HeaderTags {
				it.opts = append(it.opts, jetbus.WithTags(parts...))
			} else {
				it.opts = append(it.opts, jetbus.WithCausedBy(parts...))
			}
		case jetbus.HeaderContentType:
			// The stored event's is always application/json; the body is checked instead.
		default:
			switch {
			case hasPrefixFold(name, "nats-"):
				return bad("NATS and JetStream directives are not accepted through ingress (only Nats-Msg-Id)")
			case hasPrefixFold(name, "x-"):
				if err := jetbus.ValidateHeaderName(name); err != nil {
					return bad("%v", err)
				}
				if custom == nil {
					custom = make(map[string]string, len(h))
				}
				custom[name] = v
			}
		}
	}
	if size > MaxHeaderBytes {
		return refuse(CodeTooLarge, map[string]any{"header_bytes": size, "max": MaxHeaderBytes},
			"headers of %d bytes exceed the limit of %d", size, MaxHeaderBytes)
	}
	if custom != nil {
		it.opts = append(it.opts, jetbus.WithHeaders(custom))
	}
	if traceParent != "" || traceState != "" {
		it.opts = append(it.opts, jetbus.WithTraceContext(traceParent, traceState))
	}
	if bag != "" {
		it.opts = append(it.opts, jetbus.WithBaggage(bag))
	}
	return nil
}

// traceHeaderMax is the longest value of a trace context header the Bus keeps.
func traceHeaderMax(name string) int {
	switch name {
	case jetbus.HeaderTraceParent:
		return jetbus.MaxTraceParentLength
	case jetbus.HeaderTraceState:
		return jetbus.MaxTraceStateLength
	}
	return jetbus.MaxBaggageLength
}

// hasPrefixFold reports whether s starts with the lower-case ASCII prefix p, in any case.
func hasPrefixFold(s, p string) bool {
	return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p)
}

// controlChar returns the index of the first ASCII control character of s, or -1.
func controlChar(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return i
		}
	}
	return -1
}

// item is one message taken off the subscription, from check to its end: stored and
// answered, refused (answered or dead-lettered), or abandoned when ingress stops. It holds
// an in-flight slot all along.
type item struct {
	subject, reply, topic string
	header                nats.Header
	data                  []byte
	opts                  []jetbus.PublishOption
	clientID              string
	start                 time.Time
	// event is the event of the first publish attempt: a retry publishes it again with the
	// same ID and time, so that JetStream stores it once.
	event *jetbus.Event
	fut   jetbus.PublishFuture
	ref   *refusal
	// refusal says it holds one of the refusals' places, not a valid message's.
	refusal bool
	// span is the message's server span while ingress traces (nil otherwise, and once ended).
	span trace.Span
}
