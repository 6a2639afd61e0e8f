package snapshotapi

import (
	"fmt"
	"net/http"

	"github.com/jetbus/jetbus"
)

// ErrInvalidConfig is returned by Config.Validate and New for a Config field out of range,
// named in the message. It wraps jetbus.ErrInvalidConfig.
var ErrInvalidConfig = fmt.Errorf("snapshotapi: %w", jetbus.ErrInvalidConfig)

// Error codes of the API's one error shape, {"error":{"code","message","details"}}. The
// OpenAPI document lists them; clients branch on the code, never on the message.
const (
	CodeBadQuery         = "bad_query"           // 400: a parameter the grammar refuses (details.param, details.reason)
	CodeBadCursor        = "bad_cursor"          // 400: a cursor that is not one this API issued for this query
	CodeBadPosition      = "bad_position"        // 400: a position (since, Last-Event-ID) that is not one this API issued
	CodeBadKey           = "bad_key"             // 400: a key no event can have (empty, too long, control characters)
	CodeBadHeader        = "bad_header"          // 400: a malformed If-Match or If-None-Match
	CodeBadBody          = "bad_body"            // 400, 415: a request body that is not what the route reads (POST /v1/tickets)
	CodeQueryTooLong     = "query_too_long"      // 400: a query string over the limit
	CodeUnauthorized     = "unauthorized"        // 401: no, an invalid or an expired token
	CodeForbidden        = "forbidden"           // 403: a valid token without the view in its scope
	CodeNotFound         = "not_found"           // 404: no such key (or deleted), or no such route
	CodeUnknownView      = "unknown_view"        // 404: the view is not declared
	CodeUnknownTopic     = "unknown_topic"       // 404: the topic is not served (Config.Topics) or has no stream
	CodeMethodNotAllowed = "method_not_allowed"  // 405
	CodeNotAcceptable    = "not_acceptable"      // 406: a watch whose Accept excludes text/event-stream
	CodePositionExpired  = "position_expired"    // 410: a position (since, Last-Event-ID) older than what can be resumed: start again without it
	CodePrecondition     = "precondition_failed" // 412: If-Match or If-Unmodified-Since did not hold
	CodeBodyTooLarge     = "body_too_large"      // 413
	CodeNoHistory        = "no_history"          // 422: ?at= on a view whose projection keeps no history
	CodeHistoryExpired   = "history_expired"     // 422: ?at= older than the history's retention
	CodeNotKeyed         = "not_keyed"           // 422: a topic's key read on a topic that is not keyed
	CodeNotJSON          = "not_json"            // 422: a topic's key whose event body is not JSON (a foreign client's)
	CodeHeadersTooLarge  = "headers_too_large"   // 431
	CodeNotApplied       = "not_applied"         // 503: ?after= not reached within wait (Retry-After)
	CodeUnavailable      = "unavailable"         // 503: MongoDB did not answer (Retry-After)
	CodeTimeout          = "timeout"             // 503: the request ran out of time (Retry-After)
	CodeInternal         = "internal"            // 500: a fault of this server, never of the request
	// CodeOverflow is the code of a watch's overflow event (not an HTTP status): the client
	// read more slowly than the view changed, past Config.WatchBuffer.
	CodeOverflow = "overflow"
)

// apiError is an HTTP error in the API's shape.
type apiError struct {
	Status  int            `json:"-"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	// header is set on the response (WWW-Authenticate, Retry-After, Allow).
	header http.Header
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *apiError) with(key string, v any) *apiError {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = v
	return e
}

func (e *apiError) withHeader(name, v string) *apiError {
	if e.header == nil {
		e.header = http.Header{}
	}
	e.header.Set(name, v)
	return e
}

// badQuery is a 400 about one query parameter.
func badQuery(param, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, CodeBadQuery, format, args...).with("param", param)
}
