package projection_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/projection"
)

// TestDataErrorsDeadLettered: every event that can never be applied is dead-lettered with
// reason "projection" and its error, and the rest of its batch lands.
func TestDataErrorsDeadLettered(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 101) + `1` + strings.Repeat(`}`, 101)
	cases := []struct {
		name    string
		cfg     func(*projection.Config)
		bad     []published // each with its own key
		wantErr string
	}{
		{"$-prefixed field", nil, []published{{key: "d1", payload: `{"$set":{"x":1}}`}}, "starts with $"},
		{"$-prefixed nested field", nil, []published{{key: "d2", payload: `{"a":{"$gt":1}}`}}, `"a.$gt" starts with $`},
		{"dotted field", nil, []published{{key: "d3", payload: `{"a.b":1}`}}, "contains a dot"},
		{"dotted nested field", nil, []published{{key: "d4", payload: `{"a":[{"b.c":1}]}`}}, "contains a dot"},
		{"array payload in replace mode", nil, []published{{key: "s1", payload: `[1,2]`}}, "an array, not a JSON object"},
		{"string payload in replace mode", nil, []published{{key: "s2", payload: `"x"`}}, "a string, not a JSON object"},
		{"number payload in merge mode", func(c *projection.Config) { c.Mode = projection.Merge }, []published{{key: "s3", payload: `42`}}, "a number, not a JSON object"},
		{"reserved field", nil, []published{{key: "r1", payload: `{"_v":99}`}}, `"_v" is reserved`},
		{"reserved _id", nil, []published{{key: "r2", payload: `{"_id":"other"}`}}, `"_id" is reserved`},
		{"duplicate field", nil, []published{{key: "r3", payload: `{"a":1,"a":2}`}}, "appears twice"},
		{"too deep", nil, []published{{key: "r4", payload: deep}}, "deeper than MongoDB's 100 levels"},
		{"no key", nil, []published{{key: "", payload: `{"a":1}`}}, "has no key"},
		{"number out of range", nil, []published{{key: "n1", payload: `{"a":1e400}`}}, "does not fit in a double"},
		{"version not an integer", func(c *projection.Config) { c.Version = "/v" }, []published{{key: "v1", payload: `{"v":"3"}`}}, "is a string, not an integer"},
		{"version missing", func(c *projection.Config) { c.Version = "/v" }, []published{{key: "v2", payload: `{"w":3}`}}, "no version at /v"},
		{"tombstone without a version header", func(c *projection.Config) { c.Version = "/v" }, []published{{key: "v3", payload: `null`}}, "needs its version in the x-version header"},
		{"unique index clash", func(c *projection.Config) {
			c.Indexes = []projection.Index{{Fields: []string{"email"}, Unique: true}}
		}, []published{{key: "u2", payload: `{"email":"x@example.com","v":2}`}}, "E11000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "orders", 2)
			cfg := e.config("orders-view")
			cfg.Version = ""
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			good := func(key string, v int) {
				e.publish(key, fmt.Sprintf(`{"email":"%s@example.com","v":%d}`, key, v))
			}
			good("g1", 1)
			if tc.name == "unique index clash" {
				e.publish("u1", `{"email":"x@example.com","v":1}`)
			}
			for _, b := range tc.bad {
				e.publish(b.key, b.payload)
			}
			good("g2", 3)
			good("g1", 4)
			r := start(t, e.changelog(cfg).Run)
			e.waitLag("orders-view", 20*time.Second)
			require.NoError(t, r.stop())

			docs := e.docs("view")
			assert.Equal(t, int64(4), docs["g1"]["v"], "the rest of the batch landed")
			assert.Contains(t, docs, "g2")
			letters := e.letters()
			require.Len(t, letters, len(tc.bad), "dead letters")
			for i, l := range letters {
				assert.Equal(t, dlq.ReasonProjection, l.Reason)
				assert.Equal(t, "orders-view", l.Group)
				assert.Equal(t, tc.bad[i].key, l.Key)
				assert.Contains(t, l.Error, tc.wantErr)
				assert.NotContains(t, docs, tc.bad[i].key)
			}
		})
	}
}

// TestDocumentTooLarge: a merge that would make a document larger than 16 MiB is refused by
// MongoDB; that event is dead-lettered, the earlier ones of its key and the other keys land,
// and later events of the key still apply.
func TestDocumentTooLarge(t *testing.T) {
	e := newEnv(t, "big", 1)
	field := strings.Repeat("x", 1_000_000)
	for i := range 17 {
		e.publish("big", fmt.Sprintf(`{"f%02d":"%s"}`, i, field))
		e.publish(fmt.Sprintf("small%d", i), `{"n":1}`)
	}
	cfg := e.config("big-view")
	cfg.Topic, cfg.Mode = "big", projection.Merge
	// One batch carries about 17 MB: give its write, and the lease heartbeat beside it, the
	// time they take under -race on two busy cores (the env's settings suit small documents).
	cfg.WriteTimeout, cfg.AckTimeout, cfg.TTL = 30*time.Second, 90*time.Second, 10*time.Second
	r := start(t, e.changelog(cfg).Run)
	e.topic = "big"
	e.waitLag("big-view", 120*time.Second)

	letters := e.letters()
	require.Len(t, letters, 1)
	assert.Equal(t, "big", letters[0].Key)
	assert.Equal(t, dlq.ReasonProjection, letters[0].Reason)
	assert.Contains(t, letters[0].Error, "10334")
	docs := e.docs("view")
	assert.Len(t, docs, 18)
	for i := range 16 {
		assert.Len(t, docs["big"][fmt.Sprintf("f%02d", i)], len(field))
	}
	assert.NotContains(t, docs["big"], "f16")

	// Later events of the key apply.
	e.publish("big", `{"f00":null,"f16":"small"}`)
	e.waitLag("big-view", 120*time.Second)
	require.NoError(t, r.stop())
	docs = e.docs("view")
	assert.NotContains(t, docs["big"], "f00")
	assert.Equal(t, "small", docs["big"]["f16"])
}

var _ = context.Background
var _ = jetbus.ErrClosed
