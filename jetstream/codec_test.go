package jetstream

import (
	"encoding/json"
	"errors"
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
