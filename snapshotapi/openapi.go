package snapshotapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/jetbus/jetbus/schema"
)

// /openapi.json: an OpenAPI 3.1 document of the API as configured, one path per view so
// that each view's filters, orders and fields are typed. A view whose topic has a schema in
// the registry gets it as components.schemas["Payload.<view>"], and its item schema takes
// its fields' subschemas from there (local $refs rewritten to the new place); fields without
// one take the declared filter type, or any JSON value. The document is public: it names
// views and fields, never data.

// openAPICache keeps the last document, rebuilt when a topic's latest schema changes.
type openAPICache struct {
	mu   sync.Mutex
	key  string
	body []byte
	etag string
}

func (s *Server) getOpenAPI(c echo.Context) error {
	body, etag := s.openAPIDocument(ctxOf(c))
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	addVary(h, "Accept-Encoding")
	gz := acceptsGzip(c.Request())
	if gz {
		etag = strings.TrimSuffix(etag, `"`) + `-gz"`
	}
	h.Set("ETag", etag)
	if stop, err := s.conditional(c, routeOpenAPI, validators{etag: etag}); stop || err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
}

// openAPIDocument returns the document and its entity tag.
func (s *Server) openAPIDocument(ctx context.Context) ([]byte, string) {
	payloads := map[string]*schema.Version{}
	var key strings.Builder
	if s.schemas != nil {
		for _, v := range s.order {
			ver, err := s.schemas.Latest(ctx, v.Topic)
			if err != nil {
				if !errors.Is(err, schema.ErrNoSchema) {
					s.log.Warn("openapi.json: no schema from the registry", "topic", v.Topic, "error", err)
				}
				continue
			}
			payloads[v.Name] = ver
			key.WriteString(v.Name + "\x00" + ver.Fingerprint + "\x00")
		}
		for _, t := range s.cfg.Topics {
			ver, err := s.schemas.Latest(ctx, t)
			if err != nil {
				if !errors.Is(err, schema.ErrNoSchema) {
					s.log.Warn("openapi.json: no schema from the registry", "topic", t, "error", err)
				}
				continue
			}
			payloads[TopicScope(t)] = ver
			key.WriteString(TopicScope(t) + "\x00" + ver.Fingerprint + "\x00")
		}
	}
	oc := &s.openapi
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.body != nil && oc.key == key.String() {
		return oc.body, oc.etag
	}
	body, err := json.Marshal(s.buildOpenAPI(payloads))
	if err != nil {
		panic("snapshotapi: the OpenAPI document does not encode: " + err.Error())
	}
	sum := sha256.Sum256(body)
	oc.key, oc.body, oc.etag = key.String(), body, `"o-`+base64.RawURLEncoding.EncodeToString(sum[:12])+`"`
	return oc.body, oc.etag
}

type obj = map[string]any

func ref(to string) obj { return obj{"$ref": "#/components/" + to} }

var errorCodes = []string{CodeBadQuery, CodeBadCursor, CodeBadPosition, CodeBadKey, CodeBadHeader, CodeBadBody, CodeQueryTooLong, CodeUnauthorized,
	CodeForbidden, CodeNotFound, CodeUnknownView, CodeUnknownTopic, CodeMethodNotAllowed, CodeNotAcceptable, CodePositionExpired, CodePrecondition, CodeBodyTooLarge, CodeNoHistory,
	CodeHistoryExpired, CodeNotKeyed, CodeNotJSON, CodeHeadersTooLarge, CodeNotApplied, CodeUnavailable, CodeTimeout, CodeInternal}

func (s *Server) buildOpenAPI(payloads map[string]*schema.Version) obj {
	secured := !s.auth.open
	schemas := obj{
		"Error": obj{
			"type": "object", "required": []string{"error"}, "additionalProperties": false,
			"properties": obj{"error": obj{
				"type": "object", "required": []string{"code", "message", "details"}, "additionalProperties": false,
				"properties": obj{
					"code":    obj{"type": "string", "enum": errorCodes},
					"message": obj{"type": "string"},
					"details": obj{"type": "object"},
				},
			}},
		},
	}
	headers := obj{
		"ETag":             obj{"description": "Strong entity tag of the representation (a key: from its _v; absent when a document has none).", "schema": obj{"type": "string"}},
		"Last-Modified":    obj{"description": "Event time (_ts) of the version served.", "schema": obj{"type": "string"}},
		"Cache-Control":    obj{"description": "The view's cache_control.", "schema": obj{"type": "string"}, "required": true},
		"Link":             obj{"description": "RFC 8288 link to the next page (rel=\"next\"), when there is one.", "schema": obj{"type": "string"}},
		"Retry-After":      obj{"description": "Seconds to wait before trying again.", "schema": obj{"type": "string"}},
		"WWW-Authenticate": obj{"description": "RFC 6750 bearer challenge.", "schema": obj{"type": "string"}},
		PositionHeader: obj{"description": "The position in the view's changes this page reflects at least (opaque, URL-safe, valid on any replica): " +
			"watch the view with since=<it> to get every change after it. Changes just before the page was read may come again: keep the greater _v.",
			"schema": obj{"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}},
	}
	errResp := func(desc string, hdrs ...string) obj {
		r := obj{"description": desc, "content": obj{"application/json": obj{"schema": ref("schemas/Error")}}}
		if len(hdrs) > 0 {
			h := obj{}
			for _, name := range hdrs {
				h[name] = ref("headers/" + name)
			}
			r["headers"] = h
		}
		return r
	}
	responses := obj{
		"BadRequest":         errResp("The query, path or a header is malformed: bad_query, bad_cursor, bad_key, bad_header, query_too_long."),
		"Unauthorized":       errResp("No, an invalid or an expired token: unauthorized.", "WWW-Authenticate"),
		"Forbidden":          errResp("The token may not read this view: forbidden.", "WWW-Authenticate"),
		"NotFound":           errResp("No such key (or it was deleted), or no such view or topic: not_found, unknown_view, unknown_topic."),
		"PreconditionFailed": errResp("If-Match or If-Unmodified-Since did not hold: precondition_failed."),
		"Unprocessable":      errResp("The read cannot be answered: no_history, history_expired (views' at=), not_keyed, not_json (topics)."),
		"Unavailable":        errResp("after= not reached within wait (not_applied, with how far behind), or MongoDB unavailable or slow: unavailable, timeout.", "Retry-After"),
		"Error":              errResp("Any other error (405, 413, 415, 431, 500), in the same shape."),
		"NotAcceptable":      errResp("A watch whose Accept excludes text/event-stream: not_acceptable."),
		"Gone":               errResp("A watch's position (since, Last-Event-ID) is older than what can be resumed — the oplog or the snapshot history no longer holds it, or the view was rebuilt since: position_expired. Start again without since."),
		"NotModified": obj{"description": "The representation matches If-None-Match (or If-Modified-Since).",
			"headers": obj{"ETag": ref("headers/ETag"), "Cache-Control": ref("headers/Cache-Control")}},
	}
	params := obj{
		"meta":  obj{"name": "meta", "in": "query", "description": "1 or true adds the internal fields _v (version) and _ts (event time).", "schema": obj{"type": "string", "enum": []string{"1", "true", "0", "false"}}},
		"after": obj{"name": "after", "in": "query", "description": "Read-your-writes: answer once the view has applied these positions, <partition>:<seq>[,…], as Publish and ingress return them; else 503 not_applied.", "schema": obj{"type": "string", "pattern": `^[0-9]+:[0-9]+(,[0-9]+:[0-9]+)*$`}},
		"wait": obj{"name": "wait", "in": "query", "description": "How long after= may wait (a duration such as 2s; default " + s.cfg.DefaultWait.String() + ", at most " + s.cfg.MaxWait.String() + ").",
			"schema": obj{"type": "string"}},
		"watch": obj{"name": "watch", "in": "query", "description": "true (with GET and Accept: text/event-stream) watches the list: its filtered documents in key order (event: upsert), " +
			"then event: synced, then every change after it, as Server-Sent Events. A watch takes filters, since, meta and ticket, not order, limit, cursor, after or wait.",
			"schema": obj{"type": "string", "enum": []string{"true", "1", "false", "0"}}},
		"since": obj{"name": "since", "in": "query", "description": "A watch's start: a position (a message's id, synced's, or a list's Jetbus-Position); only the changes after it come. Last-Event-ID wins over it. " +
			"One older than what can be resumed is a 410.", "schema": obj{"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}},
		"ticket": obj{"name": "ticket", "in": "query", "description": "A watch's credentials for a browser's EventSource, which cannot send Authorization: a ticket from POST /v1/tickets. Never a bearer token.",
			"schema": obj{"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}},
		"Last-Event-ID": obj{"name": "Last-Event-ID", "in": "header", "description": "A reconnecting watch's start, as EventSource sends it: the id of the last message received (wins over since).",
			"schema": obj{"type": "string"}},
		"If-None-Match":       obj{"name": "If-None-Match", "in": "header", "description": "Entity tags (or *): 304 when one matches (weak comparison).", "schema": obj{"type": "string"}},
		"If-Match":            obj{"name": "If-Match", "in": "header", "description": "Entity tags (or *): 412 unless one matches (strong comparison).", "schema": obj{"type": "string"}},
		"If-Modified-Since":   obj{"name": "If-Modified-Since", "in": "header", "description": "HTTP date: 304 when not modified since (ignored with If-None-Match).", "schema": obj{"type": "string"}},
		"If-Unmodified-Since": obj{"name": "If-Unmodified-Since", "in": "header", "description": "HTTP date: 412 when modified since (ignored with If-Match).", "schema": obj{"type": "string"}},
	}
	condParams := []any{ref("parameters/If-None-Match"), ref("parameters/If-Match"), ref("parameters/If-Modified-Since"), ref("parameters/If-Unmodified-Since")}
	errRefs := func(codes ...string) obj {
		m := obj{}
		for _, c := range codes {
			switch c {
			case "304":
				m[c] = ref("responses/NotModified")
			case "400":
				m[c] = ref("responses/BadRequest")
			case "401":
				m[c] = ref("responses/Unauthorized")
			case "403":
				m[c] = ref("responses/Forbidden")
			case "404":
				m[c] = ref("responses/NotFound")
			case "406":
				m[c] = ref("responses/NotAcceptable")
			case "410":
				m[c] = ref("responses/Gone")
			case "412":
				m[c] = ref("responses/PreconditionFailed")
			case "422":
				m[c] = ref("responses/Unprocessable")
			case "503":
				m[c] = ref("responses/Unavailable")
			}
		}
		m["default"] = ref("responses/Error")
		return m
	}
	var security, listSecurity []any
	if secured {
		security = []any{obj{"bearer": []string{}}}
		listSecurity = []any{obj{"bearer": []string{}}, obj{"ticket": []string{}}}
	}
	paths := obj{}
	for _, v := range s.order {
		item, payload := s.itemSchema(v, payloads[v.Name])
		schemas["View."+v.Name] = item
		if payload != nil {
			schemas["Payload."+v.Name] = payload
		}
		schemas["List."+v.Name] = obj{
			"type": "object", "required": []string{"items"}, "additionalProperties": false,
			"properties": obj{
				"items": obj{"type": "array", "items": ref("schemas/View." + v.Name)},
				"next":  obj{"type": "string", "description": "Cursor of the next page (also in the Link header)."},
			},
		}
		keyOK := errRefs("304", "400", "401", "403", "404", "412", "422", "503")
		keyOK["200"] = obj{"description": "The document.",
			"headers": obj{"ETag": ref("headers/ETag"), "Last-Modified": ref("headers/Last-Modified"), "Cache-Control": ref("headers/Cache-Control")},
			"content": obj{"application/json": obj{"schema": ref("schemas/View." + v.Name)}}}
		keyParams := append([]any{
			obj{"name": "key", "in": "path", "required": true, "description": "The event key (URL-encoded).", "schema": obj{"type": "string"}},
			ref("parameters/meta"),
			obj{"name": "at", "in": "query", "description": "The key's state at this time (RFC 3339 or Unix ms), from the projection's history.", "schema": obj{"type": "string"}},
			ref("parameters/after"), ref("parameters/wait"),
		}, condParams...)
		keyOp := func(head bool) obj {
			op := obj{"operationId": "get_" + v.Name, "summary": "One document of view " + v.Name + ", by key.",
				"tags": []string{v.Name}, "parameters": keyParams, "responses": keyOK}
			if head {
				op["operationId"] = "head_" + v.Name
				op["summary"] = "Headers of one document of view " + v.Name + " (ETag, Last-Modified)."
			}
			if secured {
				op["security"] = security
			}
			return op
		}
		paths["/v1/views/"+v.Name+"/{key}"] = obj{"get": keyOp(false), "head": keyOp(true)}

		orders := []string{"_id.asc", "_id.desc"}
		for _, f := range v.Sort {
			orders = append(orders, f+".asc", f+".desc")
		}
		listParams := []any{
			obj{"name": "order", "in": "query", "description": "Sort order; ties go by _id.", "schema": obj{"type": "string", "enum": orders}},
			obj{"name": "limit", "in": "query", "description": "Page size (default and at most " + strconv.Itoa(v.MaxLimit) + ").", "schema": obj{"type": "integer", "minimum": 1, "maximum": v.MaxLimit}},
			obj{"name": "cursor", "in": "query", "description": "The next cursor of the previous page (opaque; only for the same filters and order).", "schema": obj{"type": "string"}},
			ref("parameters/meta"), ref("parameters/after"), ref("parameters/wait"),
			ref("parameters/If-None-Match"), ref("parameters/If-Match"),
			ref("parameters/watch"), ref("parameters/since"), ref("parameters/ticket"), ref("parameters/Last-Event-ID"),
		}
		for _, f := range v.filterNames {
			t := v.Filters[f]
			ops := "eq, ne, gt, gte, lt, lte, in"
			if t == String {
				ops += ", prefix"
			}
			listParams = append(listParams, obj{"name": f, "in": "query", "explode": true,
				"description": "Filter on " + f + " (" + string(t) + "): <op>.<value>, op one of " + ops + "; in.(a,b,\"c,d\"). Repeat for several conditions (all must hold).",
				"schema":      obj{"type": "array", "items": obj{"type": "string", "pattern": `^(eq|ne|gt|gte|lt|lte|in|prefix)\.`}}})
		}
		listOK := errRefs("304", "400", "401", "403", "404", "406", "410", "412", "503")
		listOK["200"] = obj{"description": "A page of documents; or, with watch=true, the list watched (text/event-stream).",
			"headers": obj{"ETag": ref("headers/ETag"), "Link": ref("headers/Link"), "Cache-Control": ref("headers/Cache-Control"), PositionHeader: ref("headers/" + PositionHeader)},
			"content": obj{
				"application/json": obj{"schema": ref("schemas/List." + v.Name)},
				"text/event-stream": obj{"schema": obj{"type": "string", "description": watchDescription(s.cfg.KeepAlive)},
					"x-events": obj{"upsert": ref("schemas/WatchUpsert." + v.Name), "delete": ref("schemas/WatchDelete"),
						"synced": ref("schemas/WatchSynced"), "overflow": ref("schemas/Error"), "disconnect": ref("schemas/Error")}},
			}}
		schemas["WatchUpsert."+v.Name] = obj{"type": "object", "required": []string{"key", "v", "doc"}, "additionalProperties": false,
			"description": "The data of event: upsert: a document that is (now) in the watched list.",
			"properties": obj{"key": obj{"type": "string"}, "v": obj{"type": "integer", "description": "The version (_v); a key's versions only increase."},
				"doc": ref("schemas/View." + v.Name)}}
		listOp := func(head bool) obj {
			op := obj{"operationId": "list_" + v.Name, "summary": "A page of view " + v.Name + ", filtered and ordered.",
				"tags": []string{v.Name}, "parameters": listParams, "responses": listOK}
			if head {
				op["operationId"] = "head_list_" + v.Name
				op["summary"] = "Headers of a page of view " + v.Name + "."
			}
			if secured {
				op["security"] = security
				if !head {
					op["security"] = listSecurity
				}
			}
			return op
		}
		paths["/v1/views/"+v.Name] = obj{"get": listOp(false), "head": listOp(true)}
	}
	schemas["WatchDelete"] = obj{"type": "object", "required": []string{"key"}, "additionalProperties": false,
		"description": "The data of event: delete: the key left the watched list — deleted (v: the tombstone's version), no longer matching the filters (v: the version that made it leave), or removed from the collection (no v: its versions start again).",
		"properties":  obj{"key": obj{"type": "string"}, "v": obj{"type": "integer"}}}
	schemas["WatchSynced"] = obj{"type": "object", "description": "The data of event: synced ({}): the documents before it are the list at its id's position."}
	schemas["TicketRequest"] = obj{"type": "object", "required": []string{"views"}, "additionalProperties": false,
		"properties": obj{"views": obj{"type": "array", "minItems": 1, "items": obj{"type": "string"}, "description": "The views the ticket may watch; the token must may read each."}}}
	schemas["Ticket"] = obj{"type": "object", "required": []string{"ticket", "views", "expires"}, "additionalProperties": false,
		"properties": obj{
			"ticket":  obj{"type": "string", "description": "Opaque; pass it as ?ticket= to a watch of one of its views."},
			"views":   obj{"type": "array", "items": obj{"type": "string"}},
			"expires": obj{"type": "string", "format": "date-time", "description": "After this no watch opens with it (" + s.cfg.TicketTTL.String() + " after it was issued); a stream it opened goes on."},
		}}
	ticketOp := obj{"operationId": "create_ticket", "summary": "A short-lived ticket to watch views from a browser (EventSource cannot send Authorization).",
		"tags":        []string{"watch"},
		"requestBody": obj{"required": true, "content": obj{"application/json": obj{"schema": ref("schemas/TicketRequest")}}},
		"responses": func() obj {
			r := errRefs("400", "401", "403", "404")
			r["201"] = obj{"description": "The ticket.", "content": obj{"application/json": obj{"schema": ref("schemas/Ticket")}}}
			return r
		}()}
	if secured {
		ticketOp["security"] = []any{obj{"bearer": []string{}}}
	}
	paths[routeTickets] = obj{"post": ticketOp}
	for _, t := range s.cfg.Topics {
		s.topicPaths(paths, schemas, t, payloads[TopicScope(t)], errRefs("304", "400", "401", "403", "404", "412", "422", "503"), condParams, security)
	}
	docOK := obj{"200": obj{"description": "This document.", "content": obj{"application/json": obj{"schema": obj{"type": "object"}}}},
		"304": ref("responses/NotModified"), "default": ref("responses/Error")}
	paths["/openapi.json"] = obj{
		"get":  obj{"operationId": "openapi", "summary": "The OpenAPI 3.1 document of this API.", "security": []any{}, "responses": docOK},
		"head": obj{"operationId": "head_openapi", "summary": "Headers of the OpenAPI document.", "security": []any{}, "responses": docOK},
	}
	components := obj{"schemas": schemas, "responses": responses, "parameters": params, "headers": headers}
	if secured {
		components["securitySchemes"] = obj{"bearer": obj{"type": "http", "scheme": "bearer",
			"description": "A static token from the configuration, or a JWT whose scope claim lists the views."},
			"ticket": obj{"type": "apiKey", "in": "query", "name": "ticket",
				"description": "A ticket from POST /v1/tickets: accepted by watches (watch=true) of its views only."}}
	}
	doc := obj{
		"openapi": "3.1.0",
		"info": obj{"title": "jetbus snapshot API", "version": "1",
			"description": "Materialized views of jetbus topics, read-only. Errors are {\"error\":{\"code\",\"message\",\"details\"}}. " +
				"Responses carry strong ETags; If-None-Match answers 304. Lists page with an opaque cursor and Link rel=\"next\", and carry the position they reflect (Jetbus-Position); " +
				"with watch=true a list streams its documents, then every change, as Server-Sent Events (docs/views.md, \"Watching a view\")."},
		"paths":      paths,
		"components": components,
	}
	if secured {
		doc["security"] = security
	}
	if s.tracer != nil {
		addTraceContext(components, paths)
	}
	return doc
}

// addTraceContext describes what a traced API adds (trace.go): every operation takes W3C
// traceparent and tracestate headers, and every answer carries traceresponse.
func addTraceContext(components, paths obj) {
	components["headers"].(obj)[HeaderTraceResponse] = obj{"description": "W3C Trace Context Level 2: the context of this request's server span, " +
		"00-<trace-id>-<span-id>-<flags>, to find the request's trace.", "schema": obj{"type": "string", "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"}}
	params := components["parameters"].(obj)
	params["traceparent"] = obj{"name": "traceparent", "in": "header", "description": "W3C Trace Context: the request's span continues this trace (a malformed one is ignored).",
		"schema": obj{"type": "string"}}
	params["tracestate"] = obj{"name": "tracestate", "in": "header", "description": "W3C Trace Context: vendor state carried with traceparent.", "schema": obj{"type": "string"}}
	withHeader := func(r any) {
		m, ok := r.(obj)
		if !ok || m["$ref"] != nil {
			return // a reference: its target in components.responses gets the header
		}
		h := obj{}
		if old, ok := m["headers"].(obj); ok {
			for k, v := range old {
				h[k] = v
			}
		}
		h[HeaderTraceResponse] = ref("headers/" + HeaderTraceResponse)
		m["headers"] = h
	}
	for _, r := range components["responses"].(obj) {
		withHeader(r)
	}
	for _, item := range paths {
		for _, op := range item.(obj) {
			op := op.(obj)
			ps, _ := op["parameters"].([]any)
			op["parameters"] = append(append([]any(nil), ps...), ref("parameters/traceparent"), ref("parameters/tracestate"))
			for _, r := range op["responses"].(obj) {
				// Operations share response objects: each gets the header once.
				if m, ok := r.(obj); ok {
					if h, ok := m["headers"].(obj); ok && h[HeaderTraceResponse] != nil {
						continue
					}
				}
				withHeader(r)
			}
		}
	}
}

// itemSchema is the JSON Schema of a view's documents, and the registry's payload schema
// (refs rewritten) to keep beside it.
func (s *Server) itemSchema(v *view, ver *schema.Version) (obj, obj) {
	var payload obj
	var payloadProps obj
	if ver != nil {
		var doc any
		if json.Unmarshal(ver.Schema, &doc) == nil {
			if m, ok := doc.(obj); ok {
				base := "#/components/schemas/Payload." + v.Name
				m = rewriteRefs(m, base).(obj)
				delete(m, "$id")
				delete(m, "$schema")
				m["description"] = "JSON Schema v" + strconv.Itoa(ver.Version) + " of topic " + ver.Topic + " (schema registry)."
				payload = m
				payloadProps, _ = m["properties"].(obj)
			}
		}
	}
	fieldSchema := func(f string) any {
		if !strings.Contains(f, ".") {
			if p, ok := payloadProps[f]; ok {
				return p
			}
		}
		switch v.Filters[f] {
		case String, Time:
			return obj{"type": []string{"string", "null"}}
		case Number:
			return obj{"type": []string{"number", "null"}}
		case Bool:
			return obj{"type": []string{"boolean", "null"}}
		}
		return obj{}
	}
	props := obj{
		"_id": obj{"type": "string", "description": "The event key."},
		"_v":  obj{"type": "integer", "description": "Version (with meta=1)."},
		"_ts": obj{"type": "string", "format": "date-time", "description": "Event time (with meta=1)."},
	}
	item := obj{"type": "object", "required": []string{"_id"}, "properties": props}
	if len(v.Fields) == 0 {
		for name, p := range payloadProps {
			if _, internal := props[name]; !internal {
				props[name] = p
			}
		}
		for f := range v.Filters {
			if _, ok := props[f]; !ok && !strings.Contains(f, ".") {
				props[f] = fieldSchema(f)
			}
		}
	} else {
		fields := append([]string(nil), v.Fields...)
		sort.Strings(fields)
		for _, f := range fields {
			setPath(props, f, fieldSchema(f))
		}
		item["additionalProperties"] = false
	}
	if ver != nil {
		item["description"] = "A document of view " + v.Name + "; payload fields as in topic " + ver.Topic + "'s schema v" + strconv.Itoa(ver.Version) + "."
	}
	return item, payload
}

// setPath puts sch at a dotted path of props, nesting {"properties": …} for the parents.
func setPath(props obj, path string, sch any) {
	head, rest, dotted := strings.Cut(path, ".")
	if !dotted {
		props[head] = sch
		return
	}
	parent, _ := props[head].(obj)
	if parent == nil {
		parent = obj{}
		props[head] = parent
	}
	sub, _ := parent["properties"].(obj)
	if sub == nil {
		sub = obj{}
		parent["properties"] = sub
	}
	setPath(sub, rest, sch)
}

// rewriteRefs copies node with every local $ref ("#…") moved under base.
func rewriteRefs(node any, base string) any {
	switch n := node.(type) {
	case obj:
		out := make(obj, len(n))
		for k, v := range n {
			if s, ok := v.(string); ok && k == "$ref" && strings.HasPrefix(s, "#") {
				if s == "#" || strings.HasPrefix(s, "#/") {
					out[k] = base + strings.TrimPrefix(s, "#")
					continue
				}
			}
			out[k] = rewriteRefs(v, base)
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = rewriteRefs(v, base)
		}
		return out
	}
	return node
}

// topicPaths adds /v1/topics/{topic}/keys/{key} of one served topic: the key's event, its
// payload described by the topic's schema in the registry when there is one.
func (s *Server) topicPaths(paths, schemas obj, topic string, ver *schema.Version, responses obj, condParams []any, security []any) {
	payload := obj{"description": "The event's JSON payload (never null: a tombstone is a 404)."}
	if ver != nil {
		var doc any
		if json.Unmarshal(ver.Schema, &doc) == nil {
			if m, ok := doc.(obj); ok {
				name := "TopicPayload." + topic
				m = rewriteRefs(m, "#/components/schemas/"+name).(obj)
				delete(m, "$id")
				delete(m, "$schema")
				m["description"] = "JSON Schema v" + strconv.Itoa(ver.Version) + " of topic " + ver.Topic + " (schema registry)."
				schemas[name] = m
				payload = ref("schemas/" + name)
			}
		}
	}
	name := "KeyEvent." + topic
	schemas[name] = obj{
		"type": "object", "required": []string{"topic", "key", "id", "partition", "seq", "ts", "payload"}, "additionalProperties": false,
		"properties": obj{
			"topic":     obj{"type": "string", "const": topic},
			"key":       obj{"type": "string"},
			"id":        obj{"type": "string", "description": "The event ID."},
			"partition": obj{"type": "integer", "minimum": 0},
			"seq":       obj{"type": "integer", "minimum": 1, "description": "The event's stream sequence (also its ETag's version)."},
			"ts":        obj{"type": "string", "format": "date-time", "description": "The event time."},
			"payload":   payload,
		},
	}
	ok := obj{}
	for k, v := range responses {
		ok[k] = v
	}
	ok["200"] = obj{"description": "The key's last event (or its last at or before at=).",
		"headers": obj{"ETag": ref("headers/ETag"), "Last-Modified": ref("headers/Last-Modified"), "Cache-Control": ref("headers/Cache-Control")},
		"content": obj{"application/json": obj{"schema": ref("schemas/" + name)}}}
	params := append([]any{
		obj{"name": "key", "in": "path", "required": true, "description": "The event key (URL-encoded).", "schema": obj{"type": "string"}},
		obj{"name": "at", "in": "query", "description": "The key's last event stored at or before this time (RFC 3339 or Unix ms; the stream's time).", "schema": obj{"type": "string"}},
	}, condParams...)
	op := func(head bool) obj {
		o := obj{"operationId": "get_topic_" + topic, "summary": "The state of a key of keyed topic " + topic + ", from the stream.",
			"tags": []string{"topic " + topic}, "parameters": params, "responses": ok}
		if head {
			o["operationId"] = "head_topic_" + topic
			o["summary"] = "Headers of the state of a key of topic " + topic + "."
		}
		if security != nil {
			o["security"] = security
		}
		return o
	}
	paths["/v1/topics/"+topic+"/keys/{key}"] = obj{"get": op(false), "head": op(true)}
}

// watchDescription describes a watch's event stream in /openapi.json.
func watchDescription(keepAlive time.Duration) string {
	return "Server-Sent Events. Each message: `id: <position>` (opaque, URL-safe, valid on any replica), " +
		"`event: upsert` or `event: delete`, and one `data:` line, a JSON object {\"key\", \"v\", \"doc\"} (x-events names the schema of each event): " +
		"doc rendered as GET /v1/views/{view}/{key} renders it, and none for a delete. Without since (or Last-Event-ID) the stream starts with the list's documents in key order " +
		"(upsert), then `event: synced` whose id is the position they reflect, then the changes after it. Per key the versions (v) only increase; a slow client gets the latest " +
		"version of a key it has not received yet. A comment `: keep-alive` comes at least every " + keepAlive.String() + " (it may carry an id: the position reached). " +
		"`event: overflow` (the client fell too far behind) and `event: disconnect` (the server stops, or the stream cannot go on) end the stream, their data in the error shape: " +
		"resume with Last-Event-ID, or, for position_expired, start again without it."
}
