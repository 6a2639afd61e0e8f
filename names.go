package jetbus

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	topicPattern      = regexp.MustCompile(`^[a-z0-9]+(\.[a-z0-9]+)*(\.v[0-9]+)?$`)
	groupPattern      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	headerNamePattern = regexp.MustCompile(`^x-[a-z0-9-]+$`)
)

// Limits on names.
const (
	MaxTopicLength = 200
	MaxGroupLength = 100
	// MaxKeyLength bounds an event key, in bytes.
	MaxKeyLength = 1024
	// MaxJSONDepth bounds how deep the arrays and objects of a payload nest. Publish refuses
	// a deeper payload (ErrInvalidPayload), ingress refuses it (not_json), and a delivery of
	// one is a decode failure (ErrDecode): refusing it costs a scan of the body, never a
	// parser's recursion per level.
	MaxJSONDepth = 128
)

// ReservedHeaderPrefixes are the custom header prefixes jetbus keeps for itself: the
// dead-letter headers and any it may add. Publish refuses them from callers
// (ErrReservedHeader); consumers never act on them in events jetbus did not write.
var ReservedHeaderPrefixes = []string{"x-dlq-", "x-jetbus-"}

// Reserved topic prefixes: dead letters and ingress subjects.
var reservedPrefixes = []string{"dlq.", "in."}

// ValidateTopic reports whether name is a valid topic name: lowercase dot-separated tokens of
// [a-z0-9], optionally ending in a version token "v<N>", at most MaxTopicLength bytes, not
// ending in a partition token "p<N>" and not starting with a reserved prefix ("dlq.", "in.").
// The error wraps ErrInvalidTopic.
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidTopic)
	case len(name) > MaxTopicLength:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalidTopic, name, MaxTopicLength)
	case !matchTopic(name):
		return fmt.Errorf("%w: %q must match %s", ErrInvalidTopic, name, topicPattern)
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) || name+"." == p {
			return fmt.Errorf("%w: %q uses the reserved prefix %q", ErrInvalidTopic, name, p)
		}
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if isPartitionToken(last) {
		return fmt.Errorf("%w: %q ends in a partition token %q, which is reserved", ErrInvalidTopic, name, last)
	}
	return nil
}

// matchTopic is topicPattern without the regexp engine: Publish checks every topic name.
// Tokens of [a-z0-9]+ separated by single dots (the optional ".v<N>" suffix is such a token).
func matchTopic(name string) bool {
	tokenLen := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			tokenLen++
		case c == '.' && tokenLen > 0:
			tokenLen = 0
		default:
			return false
		}
	}
	return tokenLen > 0
}

// ValidateGroup reports whether name is a valid consumer group name: [A-Za-z0-9_-], 1 to
// MaxGroupLength bytes. The error wraps ErrInvalidGroup.
func ValidateGroup(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidGroup)
	case len(name) > MaxGroupLength:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalidGroup, name, MaxGroupLength)
	case !groupPattern.MatchString(name):
		return fmt.Errorf("%w: %q must match %s", ErrInvalidGroup, name, groupPattern)
	}
	return nil
}

// ValidateHeaderName reports whether name may be used as a custom header: it matches
// ^x-[a-z0-9-]+$, is not one of the headers mapped to Event fields, and does not start with a
// reserved prefix (ErrReservedHeader). The error wraps ErrInvalidHeader.
func ValidateHeaderName(name string) error {
	if !headerNamePattern.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidHeader, name, headerNamePattern)
	}
	if IsMappedHeader(name) {
		return fmt.Errorf("%w: %q is set from an Event field, not from headers", ErrInvalidHeader, name)
	}
	for _, p := range ReservedHeaderPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("%w: %q starts with %q", ErrReservedHeader, name, p)
		}
	}
	return nil
}

// ValidateHeaderValue reports whether v may be a header value: no control characters (CR and
// LF would end the header on the wire). The error wraps ErrInvalidHeader.
func ValidateHeaderValue(name, v string) error {
	if i := controlChar(v); i >= 0 {
		return fmt.Errorf("%w: %s holds the control character %q at byte %d", ErrInvalidHeader, name, v[i], i)
	}
	return nil
}

// ValidateKey reports whether key may be an event key: at most MaxKeyLength bytes and no
// control characters (a key travels in the x-key header). The empty key is valid: the
// event is partitioned by its ID. The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if len(key) > MaxKeyLength {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	if i := controlChar(key); i >= 0 {
		return fmt.Errorf("%w: control character %q at byte %d", ErrInvalidKey, key[i], i)
	}
	return nil
}

// controlChar returns the index of the first ASCII control character (0x00-0x1f, 0x7f) of s,
// or -1.
func controlChar(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return i
		}
	}
	return -1
}

// StreamName returns the JetStream stream that holds topic: dots become underscores.
func StreamName(topic string) string { return strings.ReplaceAll(topic, ".", "_") }

// PartitionSubject returns the subject of one partition of a topic: "<topic>.p<n>".
func PartitionSubject(topic string, partition int) string {
	return fmt.Sprintf("%s.p%d", topic, partition)
}

// ParsePartitionSubject splits "<topic>.p<n>" into topic and partition. ok is false when the
// subject has no partition token.
func ParsePartitionSubject(subject string) (topic string, partition int, ok bool) {
	i := strings.LastIndexByte(subject, '.')
	if i <= 0 || !isPartitionToken(subject[i+1:]) {
		return "", 0, false
	}
	n := 0
	for _, c := range subject[i+2:] {
		n = n*10 + int(c-'0')
		if n > 1<<30 {
			return "", 0, false
		}
	}
	return subject[:i], n, true
}

// ParseSubject splits an event's subject: "<topic>.p<n>" (a plain topic: token is "") or
// "<topic>.p<n>.<token>" (a keyed topic). ok is false for any other subject. It is not
// ambiguous: a topic name never ends in a partition token.
func ParseSubject(subject string) (topic string, partition int, token string, ok bool) {
	if t, p, ok := ParsePartitionSubject(subject); ok && ValidateTopic(t) == nil {
		return t, p, "", true
	}
	i := strings.LastIndexByte(subject, '.')
	if i <= 0 {
		return "", 0, "", false
	}
	t, p, ok := ParsePartitionSubject(subject[:i])
	if !ok || ValidateTopic(t) != nil || subject[i+1:] == "" {
		return "", 0, "", false
	}
	return t, p, subject[i+1:], true
}

// KeyedSubject returns the subject of key's events in partition p of a keyed topic:
// "<topic>.p<n>.<KeyToken(key)>".
func KeyedSubject(topic string, partition int, key string) string {
	return PartitionSubject(topic, partition) + "." + KeyToken(key)
}

// MaxPlainKeyToken bounds the keys that are their own subject token.
const MaxPlainKeyToken = 128

// KeyToken returns the subject token of a key on a keyed topic: the key itself when it is 1
// to MaxPlainKeyToken bytes of [A-Za-z0-9_=:-], otherwise "~" followed by the unpadded
// base64url of the key's UTF-8 bytes (so the empty key is "~"). The rule is injective (a
// token starting with "~" is never a key kept as is) and every token is one valid NATS
// subject token. Vectors: testdata/key_tokens.json.
func KeyToken(key string) string {
	if plainKeyToken(key) {
		return key
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// ParseKeyToken returns the key a token stands for (the inverse of KeyToken). ok is false for
// a string KeyToken never returns.
func ParseKeyToken(token string) (key string, ok bool) {
	if plainKeyToken(token) {
		return token, true
	}
	enc, found := strings.CutPrefix(token, "~")
	if !found {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || plainKeyToken(string(b)) || base64.RawURLEncoding.EncodeToString(b) != enc {
		return "", false
	}
	return string(b), true
}

func plainKeyToken(s string) bool {
	if len(s) == 0 || len(s) > MaxPlainKeyToken {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '=', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// isPartitionToken reports whether tok is "p" followed by one or more digits.
func isPartitionToken(tok string) bool {
	if len(tok) < 2 || tok[0] != 'p' {
		return false
	}
	for i := 1; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return false
		}
	}
	return true
}

// ConsumerName returns the durable consumer of a group's partition: "<group>_p<n>". Every
// consumer of a topic's stream is named this way, one per (group, partition).
func ConsumerName(group string, partition int) string {
	return group + "_p" + strconv.Itoa(partition)
}

// PriorityGroup is the priority group every jetbus consumer pins its client in (priority
// policy "pinned_client"), so that one client consumes a partition at a time.
const PriorityGroup = "jetbus"

// FNV-1a 64-bit parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// KeyHash returns the FNV-1a 64-bit hash of key's UTF-8 bytes.
//
// Vectors (see testdata/partition_vectors.json for more):
//
//	KeyHash("")    = 0xcbf29ce484222325
//	KeyHash("a")   = 0xaf63dc4c8601ec8c
//	KeyHash("foo") = 0xdcb27518fed9d577
func KeyHash(key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return h
}

// Jump maps h to a bucket in [0, n) with Lamping and Veach's jump consistent hash ("A Fast,
// Minimal Memory, Consistent Hash Algorithm", 2014): growing n to n+1 moves about 1/(n+1) of
// the keys, all of them to the new bucket. n < 1 is treated as 1.
//
// The algorithm, for any language (64-bit unsigned arithmetic, wrapping):
//
//	b, j := -1, 0
//	while j < n:
//	    b = j
//	    h = h*2862933555777941757 + 1
//	    j = floor((b+1) * (2^31 / ((h>>33)+1)))   // in double precision
//	return b
func Jump(h uint64, n int) int {
	if n < 1 {
		n = 1
	}
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		h = h*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((h>>33)+1)))
	}
	return int(b)
}

// PartitionOf returns the partition of key in a topic with n partitions:
// Jump(KeyHash(key), n). Every jetbus client, in any language, computes the same partition for
// the same key; a publish without a key is partitioned by its event ID.
func PartitionOf(key string, n int) int { return Jump(KeyHash(key), n) }
