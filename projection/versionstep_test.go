package projection_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/projection"
)

// TestVersionsOutOfRange: a payload version that is not an integer from 0 to 2^63-1 — a
// negative, a float, one past int64, a string — and a tombstone's x-version likewise, is
// dead-lettered with the reason, and the key's later events apply.
func TestVersionsOutOfRange(t *testing.T) {
	cases := []struct {
		name, payload string
		headers       map[string]string
		wantErr       string
	}{
		{"negative", `{"v":-1}`, nil, "the version at /v -1 is negative: a version is an integer from 0 to 9223372036854775807"},
		{"float", `{"v":7.5}`, nil, "7.5 is not an integer"},
		{"integral float", `{"v":7.0}`, nil, "7.0 is not an integer"},
		{"exponent", `{"v":7e0}`, nil, "7e0 is not an integer"},
		{"past int64", `{"v":9223372036854775808}`, nil, "9223372036854775808 is above the largest version"},
		{"far past int64", `{"v":-99999999999999999999}`, nil, "is negative"},
		{"string", `{"v":"7"}`, nil, "is a string, not an integer"},
		{"negative tombstone", `null`, map[string]string{projection.VersionHeader: "-3"}, `header x-version "-3" is negative`},
		{"tombstone past int64", `null`, map[string]string{projection.VersionHeader: "9223372036854775808"}, "is above the largest version"},
		{"tombstone float", `null`, map[string]string{projection.VersionHeader: "8.0"}, "is not an integer"},
	}
	e := newEnv(t, "orders", 1)
	for i, tc := range cases {
		key := fmt.Sprintf("k%d", i)
		e.publish(key, `{"v":5,"s":"five"}`)
		e.publish(key, tc.payload, jetbus.WithHeaders(tc.headers))
		e.publish(key, `{"v":6,"s":"six"}`)
	}
	cfg := e.config("orders-view")
	cfg.Version = "/v"
	r := start(t, e.changelog(cfg).Run)
	e.waitLag("orders-view", 20*time.Second)
	require.NoError(t, r.stop())

	docs := e.docs("view")
	letters := e.letters()
	require.Len(t, letters, len(cases))
	for i, tc := range cases {
		key := fmt.Sprintf("k%d", i)
		assert.Equal(t, "six", docs[key]["s"], "%s: the later event applied", tc.name)
		assert.Equal(t, int64(6), docs[key]["_v"], tc.name)
		assert.Equal(t, key, letters[i].Key, tc.name)
		assert.Equal(t, dlq.ReasonProjection, letters[i].Reason, tc.name)
		assert.Contains(t, letters[i].Error, tc.wantErr, tc.name)
	}
}
