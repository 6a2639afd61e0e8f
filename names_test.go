package jetbus

import (
	"errors"
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

func TestReservedAndControlCharacters(t *testing.T) {
	for _, name := range []string{"x-dlq-replay-group", "x-dlq-reason", "x-jetbus-anything"} {
		err := ValidateHeaderName(name)
		if !errors.Is(err, ErrReservedHeader) || !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("ValidateHeaderName(%q) = %v, want ErrReservedHeader", name, err)
		}
	}
	if err := ValidateHeaderName("x-dlqish"); err != nil {
		t.Errorf("x-dlqish is not reserved: %v", err)
	}
	for _, v := range []string{"a\r\nx-dlq-replay-group: g", "a\nb", "tab\there", "nul\x00", "del\x7f"} {
		if err := ValidateHeaderValue("x-note", v); !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("ValidateHeaderValue(%q) = %v, want ErrInvalidHeader", v, err)
		}
		if err := ValidateKey(v); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", v, err)
		}
		if _, err := ApplyPublishOptions(WithSID(v)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithSID(%q) = %v, want ErrInvalidOption", v, err)
		}
		if _, err := ApplyPublishOptions(WithID(v)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithID(%q) = %v, want ErrInvalidOption", v, err)
		}
		if _, err := ApplyPublishOptions(WithTags(v)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithTags(%q) = %v, want ErrInvalidOption", v, err)
		}
	}
	for _, ok := range []string{"", "user-42", "ключ 🙂", strings.Repeat("k", MaxKeyLength)} {
		if err := ValidateKey(ok); err != nil {
			t.Errorf("ValidateKey(%.20q) = %v", ok, err)
		}
	}
	if err := ValidateKey(strings.Repeat("k", MaxKeyLength+1)); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("a key of %d bytes: %v", MaxKeyLength+1, err)
	}
	// A hand-written option cannot slip a reserved header past the check either.
	sneaky := func(o *PublishOptions) error { o.Headers = map[string]string{"x-dlq-replay-group": "g"}; return nil }
	if _, err := ApplyPublishOptions(sneaky); !errors.Is(err, ErrReservedHeader) {
		t.Errorf("a reserved header set by a custom option: %v", err)
	}
}

func TestReservedIDs(t *testing.T) {
	for _, id := range []string{"replay:ORDERS:1:billing", "dlq:ORDERS:1:billing", "dlq:rejected:ingress:x"} {
		_, err := ApplyPublishOptions(WithID(id))
		if !errors.Is(err, ErrReservedHeader) {
			t.Errorf("WithID(%q): %v, want ErrReservedHeader", id, err)
		}
		if _, err := ApplyPublishOptions(WithDerivedID(id)); err != nil {
			t.Errorf("WithDerivedID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"order-1", "replay", "dlq-1", "Replay:1"} {
		if _, err := ApplyPublishOptions(WithID(id)); err != nil {
			t.Errorf("WithID(%q): %v", id, err)
		}
	}
}
