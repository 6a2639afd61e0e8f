package jetstream

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jetbus/jetbus"
)

// TestPayloadDepthBounded: a payload nesting deeper than jetbus.MaxJSONDepth is refused at
// publish, raw or marshalled, and is not valid JSON to a consumer.
func TestPayloadDepthBounded(t *testing.T) {
	deep := json.RawMessage(strings.Repeat("[", jetbus.MaxJSONDepth+1) + strings.Repeat("]", jetbus.MaxJSONDepth+1))
	if _, err := marshalPayload(deep); !errors.Is(err, jetbus.ErrInvalidPayload) {
		t.Errorf("raw: %v, want ErrInvalidPayload", err)
	}
	var v any = []any{}
	for range jetbus.MaxJSONDepth {
		v = []any{v}
	}
	if _, err := marshalPayload(v); !errors.Is(err, jetbus.ErrInvalidPayload) {
		t.Errorf("marshalled: %v, want ErrInvalidPayload", err)
	}
	if validJSON(deep) {
		t.Error("a delivery of it would be decoded")
	}
	ok := json.RawMessage(strings.Repeat("[", jetbus.MaxJSONDepth) + strings.Repeat("]", jetbus.MaxJSONDepth))
	if _, err := marshalPayload(ok); err != nil {
		t.Errorf("at the bound: %v", err)
	}
}

// FuzzParseMillis checks parseMillis against strconv.ParseInt, which it reads x-ts as.
func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{"1700000000000", "0", "", "-5", "+5", "123456789012345678", "1234567890123456789",
		"9223372036854775807", "9223372036854775808", "12a", "1_000", " 1", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseMillis(s)
		want, err := strconv.ParseInt(s, 10, 64)
		if ok != (err == nil) || (ok && got != want) {
			t.Fatalf("parseMillis(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, ok, want, err)
		}
	})
}
