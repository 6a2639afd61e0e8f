package snapshotapi

import (
	"net/http"
	"strings"
	"time"
)

// Conditional requests, RFC 9110 section 13. The API's validators are a strong entity tag
// and, for one key, Last-Modified (the event time of the version served).

// validators are the current representation's validators.
type validators struct {
	etag    string // quoted, strong
	lastMod time.Time
}

// precondition evaluates the request's preconditions in RFC 9110 13.2.2's order for a GET or
// HEAD of a representation that exists, and returns 0 (serve it), 304 or 412. A malformed
// If-Match or If-None-Match is a 400; a malformed date is ignored, as 13.1.3 and 13.1.4 say.
// (When the target does not exist the response would be 404 without the preconditions, so
// 13.2.1 has them ignored: callers do not evaluate them then.)
func precondition(h http.Header, cur validators) (int, *apiError) {
	// 1. If-Match: strong comparison.
	if im := h.Values("If-Match"); len(im) > 0 {
		match, err := matchList(im, cur.etag, true)
		if err != nil {
			return 0, newError(400, CodeBadHeader, "If-Match: %s", err).with("header", "If-Match")
		}
		if !match {
			return http.StatusPreconditionFailed, nil
		}
	} else if ius := h.Get("If-Unmodified-Since"); ius != "" && !cur.lastMod.IsZero() {
		// 2. If-Unmodified-Since, only without If-Match.
		if t, err := http.ParseTime(ius); err == nil && cur.lastMod.Truncate(time.Second).After(t) {
			return http.StatusPreconditionFailed, nil
		}
	}
	// 3. If-None-Match: weak comparison; a match is a 304 for GET and HEAD.
	if inm := h.Values("If-None-Match"); len(inm) > 0 {
		match, err := matchList(inm, cur.etag, false)
		if err != nil {
			return 0, newError(400, CodeBadHeader, "If-None-Match: %s", err).with("header", "If-None-Match")
		}
		if match {
			return http.StatusNotModified, nil
		}
		return 0, nil
	}
	// 4. If-Modified-Since, only without If-None-Match.
	if ims := h.Get("If-Modified-Since"); ims != "" && !cur.lastMod.IsZero() {
		if t, err := http.ParseTime(ims); err == nil && !cur.lastMod.Truncate(time.Second).After(t) {
			return http.StatusNotModified, nil
		}
	}
	return 0, nil
}

// checkValidators refuses a malformed If-Match or If-None-Match before anything is read.
func checkValidators(h http.Header) *apiError {
	for _, name := range []string{"If-Match", "If-None-Match"} {
		if lines := h.Values(name); len(lines) > 0 {
			if _, err := matchList(lines, "", false); err != nil {
				return newError(400, CodeBadHeader, "%s: %s", name, err).with("header", name)
			}
		}
	}
	return nil
}

// matchList reports whether the field lines (a list of entity tags, or "*") match etag: with
// strong comparison both must be strong and equal; with weak comparison the opaque tags must
// be equal.
func matchList(lines []string, etag string, strong bool) (bool, error) {
	match := false
	star := false
	tags := 0
	for _, line := range lines {
		s := line
		for {
			s = strings.TrimLeft(s, " \t")
			if s == "" {
				break
			}
			if s[0] == ',' {
				s = s[1:]
				continue
			}
			if s[0] == '*' {
				star = true
				s = s[1:]
			} else {
				weak := false
				if strings.HasPrefix(s, "W/") {
					weak = true
					s = s[2:]
				}
				tag, rest, ok := cutOpaqueTag(s)
				if !ok {
					return false, errString("not a list of entity tags (\"…\" or W/\"…\") or *")
				}
				tags++
				if tag == etag && !(strong && weak) {
					match = true
				}
				s = rest
			}
			s = strings.TrimLeft(s, " \t")
			if s != "" && s[0] != ',' {
				return false, errString("entity tags are separated by commas")
			}
		}
	}
	if star && tags > 0 {
		return false, errString("* stands alone")
	}
	if star {
		return true, nil // the representation exists
	}
	return match, nil // an empty list (RFC 9110 5.6.1 allows one) matches nothing
}

// cutOpaqueTag reads a quoted opaque tag (RFC 9110 8.8.3: etagc = %x21 / %x23-7E / obs-text)
// from the start of s and returns it with its quotes.
func cutOpaqueTag(s string) (tag, rest string, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", s, false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			return s[:i+1], s[i+1:], true
		}
		if c < 0x21 || c == 0x7f {
			return "", s, false
		}
	}
	return "", s, false
}
