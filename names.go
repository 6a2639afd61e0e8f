package jetbus

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	topicPattern      = regexp.MustCompile(`^[a-z0-9]+(\.[a-z0-9]+)*(\.v[0-9]+)?$`)
	partitionToken    = regexp.MustCompile(`^p[0-9]+$`)
	groupPattern      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	headerNamePattern = regexp.MustCompile(`^x-[a-z0-9-]+$`)
)

// Limits on names.
const (
	MaxTopicLength = 200
	MaxGroupLength = 100
)

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
	if partitionToken.MatchString(last) {
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
// ^x-[a-z0-9-]+$ and is not one of the headers mapped to Event fields. The error wraps
// ErrInvalidHeader.
func ValidateHeaderName(name string) error {
	if !headerNamePattern.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidHeader, name, headerNamePattern)
	}
	if IsMappedHeader(name) {
		return fmt.Errorf("%w: %q is set from an Event field, not from headers", ErrInvalidHeader, name)
	}
	return nil
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
	if i <= 0 || !partitionToken.MatchString(subject[i+1:]) {
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
