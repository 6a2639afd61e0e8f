package jetbus

import (
	"fmt"
	"strings"
)

// Limits on the trace context headers (docs/wire.md, "Trace context"). A longer value is
// dropped whole, as a malformed one is.
const (
	// MaxTraceParentLength bounds a traceparent: 55 bytes in version 00, more only in a later
	// version that appends fields.
	MaxTraceParentLength = 256
	// MaxTraceStateLength is the tracestate length W3C Trace Context requires every vendor
	// to propagate.
	MaxTraceStateLength = 512
	// MaxTraceStateMembers is W3C Trace Context's bound on a tracestate's list members.
	MaxTraceStateMembers = 32
	// MaxBaggageLength and MaxBaggageMembers are W3C Baggage's limits on a baggage header.
	MaxBaggageLength  = 8192
	MaxBaggageMembers = 64
)

// ValidTraceParent reports whether s is a valid W3C traceparent
// (https://www.w3.org/TR/trace-context/#traceparent-header): version "-" trace-id "-"
// parent-id "-" trace-flags in lowercase hex, version not ff, trace-id and parent-id not all
// zeros; version 00 is exactly 55 bytes with no flags but sampled (01) and random (02), a
// later version may append "-" and more fields. Whatever it accepts, OpenTelemetry's W3C
// propagator reads as the same trace and parent. A
// malformed traceparent is dropped (with its tracestate) wherever jetbus meets one, never an
// error for the event.
func ValidTraceParent(s string) bool {
	if len(s) < 55 || len(s) > MaxTraceParentLength || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !lowerHex(version) || version == "ff" || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) ||
		allZeros(traceID) || allZeros(parentID) {
		return false
	}
	if version == "00" {
		// Version 00 defines the flags sampled (01) and random (02) only; OpenTelemetry's
		// propagators refuse the others, so jetbus does too.
		return len(s) == 55 && flags[0] == '0' && flags[1] <= '3'
	}
	if len(s) == 55 {
		return true
	}
	if s[55] != '-' {
		return false
	}
	for i := 56; i < len(s); i++ { // a later version's fields: printable ASCII
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// TraceIDOf returns the trace-id of a valid traceparent, "" otherwise.
func TraceIDOf(traceparent string) string {
	if !ValidTraceParent(traceparent) {
		return ""
	}
	return traceparent[3:35]
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZeros(s string) bool {
	return strings.Trim(s, "0") == ""
}

// ValidTraceState reports whether s is a valid W3C tracestate
// (https://www.w3.org/TR/trace-context/#tracestate-header) of at most MaxTraceStateLength
// bytes: comma-separated key=value members, at most MaxTraceStateMembers, keys unique. The
// empty string is valid (no tracestate). Whatever it accepts, OpenTelemetry's W3C
// propagator reads.
func ValidTraceState(s string) bool {
	if len(s) > MaxTraceStateLength {
		return false
	}
	var keys [MaxTraceStateMembers]string
	n := 0
	for member := range strings.SplitSeq(s, ",") {
		if member == "" {
			continue // an empty list member is allowed
		}
		// A member of only spaces is allowed by W3C too, but OpenTelemetry's parsers refuse
		// the whole tracestate for it: so does jetbus, so that what it keeps they read.
		k, v, ok := strings.Cut(strings.Trim(member, " \t"), "=")
		if !ok || !traceStateKey(k) || !traceStateValue(v) || n == MaxTraceStateMembers {
			return false
		}
		for _, seen := range keys[:n] {
			if seen == k {
				return false
			}
		}
		keys[n] = k
		n++
	}
	return true
}

// traceStateKey: simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/"), or
// multi-tenant-key = tenant-id "@" system-id, tenant-id = (lcalpha / DIGIT) 0*240(...),
// system-id = lcalpha 0*13(...).
func traceStateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) >= 1 && len(k) <= 256 && isLower(k[0]) && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && (isLower(tenant[0]) || isDigit(tenant[0])) && keyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && isLower(system[0]) && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '_' && c != '-' && c != '*' && c != '/' {
			return false
		}
	}
	return true
}

// traceStateValue: 0*255(chr) nblk-chr, chr = %x20 / nblk-chr, nblk-chr = %x21-2B / %x2D-3C /
// %x3E-7E (printable ASCII but "," and "=").
func traceStateValue(v string) bool {
	if len(v) < 1 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ValidateBaggageKey reports whether k may name a W3C Baggage member: an RFC 7230 token.
// The error wraps ErrInvalidOption.
func ValidateBaggageKey(k string) error {
	if k == "" || !isToken(k) {
		return fmt.Errorf("%w: baggage key %q is not a token (RFC 7230: letters, digits and !#$%%&'*+-.^_`|~)", ErrInvalidOption, k)
	}
	return nil
}

// FilterBaggage returns the members of the W3C baggage header s
// (https://www.w3.org/TR/baggage/) whose key keep accepts, as they were written and
// comma-separated, and whether s was well-formed. A malformed s (or one longer than
// MaxBaggageLength, or with more than MaxBaggageMembers members) yields "", false: it is
// dropped whole.
func FilterBaggage(s string, keep func(key string) bool) (string, bool) {
	if len(s) > MaxBaggageLength {
		return "", false
	}
	var out strings.Builder
	n := 0
	for member := range strings.SplitSeq(s, ",") {
		member = strings.Trim(member, " \t")
		if member == "" {
			continue
		}
		if n++; n > MaxBaggageMembers {
			return "", false
		}
		key, ok := baggageMember(member)
		if !ok {
			return "", false
		}
		if keep(key) {
			if out.Len() > 0 {
				out.WriteByte(',')
			}
			out.WriteString(member)
		}
	}
	return out.String(), true
}

// baggageMember parses list-member = key OWS "=" OWS value *( OWS ";" OWS property ), with
// property = key OWS "=" OWS value / key OWS, and returns its key.
func baggageMember(m string) (string, bool) {
	first, props, _ := strings.Cut(m, ";")
	k, v, ok := strings.Cut(first, "=")
	key := strings.Trim(k, " \t")
	if !ok || !isToken(key) || !baggageValue(strings.Trim(v, " \t")) {
		return "", false
	}
	if props == "" {
		return key, true
	}
	for p := range strings.SplitSeq(props, ";") {
		pk, pv, hasValue := strings.Cut(p, "=")
		if !isToken(strings.Trim(pk, " \t")) || hasValue && !baggageValue(strings.Trim(pv, " \t")) {
			return "", false
		}
	}
	return key, true
}

// baggageValue: *baggage-octet, baggage-octet = %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E
// (printable ASCII but DQUOTE, ",", ";" and "\"), where "%" starts a percent-encoded byte
// (two hex digits) that spells the others.
func baggageValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
		if c == '%' {
			if i+2 >= len(v) || !isHex(v[i+1]) || !isHex(v[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// isToken reports whether s is an RFC 7230 token: one or more tchar.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isLower(c) || isDigit(c) || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
