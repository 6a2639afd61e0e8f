package jetbus

import (
	"strings"
	"testing"
)

// matchTopic must agree with the documented pattern.
func TestMatchTopicAgreesWithPattern(t *testing.T) {
	cases := []string{"", "a", "a.b", "a..b", ".a", "a.", "A", "a-b", "a_b", "a.v2", "a.v", "v1",
		"0", "a.b.c.d", "a b", "é", "a.*", "a.>", strings.Repeat("x.", 10) + "y"}
	for _, c := range cases {
		if got, want := matchTopic(c), topicPattern.MatchString(c); got != want {
			t.Errorf("matchTopic(%q) = %v, pattern says %v", c, got, want)
		}
	}
}

func FuzzMatchTopic(f *testing.F) {
	for _, s := range []string{"a.b", "orders.created.v2", "..", "a.p1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := matchTopic(s), topicPattern.MatchString(s); got != want {
			t.Errorf("matchTopic(%q) = %v, pattern says %v", s, got, want)
		}
	})
}

func TestParsePartitionSubject(t *testing.T) {
	for _, c := range []struct {
		in    string
		topic string
		p     int
		ok    bool
	}{
		{"orders.p3", "orders", 3, true},
		{"a.b.p0", "a.b", 0, true},
		{"orders", "", 0, false},
		{"orders.p", "", 0, false},
		{"orders.px", "", 0, false},
		{"p1", "", 0, false},
		{"orders.p99999999999", "", 0, false},
	} {
		topic, p, ok := ParsePartitionSubject(c.in)
		if topic != c.topic || p != c.p || ok != c.ok {
			t.Errorf("ParsePartitionSubject(%q) = %q, %d, %v", c.in, topic, p, ok)
		}
	}
}
