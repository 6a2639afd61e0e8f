package jetstream

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestNewEventIDIsUUIDv7(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	seen := map[string]bool{}
	for range 10000 {
		id := newEventID(now)
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("%s: version %d variant %v", id, u.Version(), u.Variant())
		}
		if got, err := uuidTime(id); err != nil || !got.Equal(now) {
			t.Fatalf("%s: time %v, %v", id, got, err)
		}
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
	}
}

func BenchmarkNewEventID(b *testing.B) {
	now := time.Now()
	for range b.N {
		_ = newEventID(now)
	}
}
