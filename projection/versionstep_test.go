package projection_test

import (
	"fmt"
	"math"
	"strconv"
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

// TestMaxVersionStep: an event whose version is more than max_version_step above its key's
// stored version is dead-lettered, not applied — 2^63-1 after 5 would otherwise make every
// later event stale — and a later event within the step applies; a normal step applies; a
// key with no stored version takes any version. The same in every mode, one event per batch
// or all in one, with and without history.
func TestMaxVersionStep(t *testing.T) {
	big := strconv.FormatInt(math.MaxInt64, 10)
	type want struct {
		s string
		v int64
	}
	for _, tc := range []struct {
		name string
		cfg  func(*projection.Config)
	}{
		{"replace", nil},
		{"merge", func(c *projection.Config) { c.Mode = projection.Merge }},
		{"replace with history", func(c *projection.Config) { c.History = time.Hour }},
		{"merge with history, keep tombstones", func(c *projection.Config) {
			c.Mode, c.History, c.Tombstones = projection.Merge, time.Hour, projection.KeepTombstones
		}},
	} {
		for _, batch := range []int{1, 100} {
			t.Run(fmt.Sprintf("%s/batch %d", tc.name, batch), func(t *testing.T) {
				e := newEnv(t, "orders", 2)
				step := projection.DefaultMaxVersionStep
				// pinned: 2^63-1 after 5 is refused, 6 applies after it.
				e.publish("pinned", `{"v":5,"s":"five"}`)
				e.publish("pinned", `{"v":`+big+`,"s":"pinned"}`)
				e.publish("pinned", `{"v":6,"s":"six"}`)
				// stepped: a step of exactly max_version_step applies, one more does not.
				e.publish("stepped", `{"v":5,"s":"five"}`)
				e.publish("stepped", fmt.Sprintf(`{"v":%d,"s":"far"}`, 5+step))
				e.publish("stepped", fmt.Sprintf(`{"v":%d,"s":"too far"}`, 5+2*step+1))
				// new: a key with no stored version takes any version, then steps from there.
				e.publish("new", `{"v":`+big+`,"s":"max"}`)
				// tomb: a tombstone too far above is refused like any event.
				e.publish("tomb", `{"v":10,"s":"ten"}`)
				e.publish("tomb", `null`, jetbus.WithHeaders(map[string]string{projection.VersionHeader: big}))
				e.publish("tomb", `{"v":11,"s":"eleven"}`)
				cfg := e.config("orders-view")
				cfg.Version, cfg.BatchSize = "/v", batch
				if tc.cfg != nil {
					tc.cfg(&cfg)
				}
				r := start(t, e.changelog(cfg).Run)
				e.waitLag("orders-view", 20*time.Second)

				docs := e.docs("view")
				for key, w := range map[string]want{
					"pinned":  {"six", 6},
					"stepped": {"far", 5 + step},
					"new":     {"max", math.MaxInt64},
					"tomb":    {"eleven", 11},
				} {
					assert.Equal(t, w.s, docs[key]["s"], key)
					assert.Equal(t, w.v, docs[key]["_v"], key)
				}
				letters := e.letters()
				refused := map[string][]string{}
				for _, l := range letters {
					assert.Equal(t, dlq.ReasonProjection, l.Reason)
					assert.Contains(t, l.Error, fmt.Sprintf("more than max_version_step (%d) above the key's version", step))
					refused[l.Key] = append(refused[l.Key], l.Error)
				}
				assert.Len(t, refused["pinned"], 1, "pinned: %v", refused["pinned"])
				assert.Contains(t, refused["pinned"][0], "version "+big+" is more than")
				assert.Contains(t, refused["pinned"][0], "above the key's version 5")
				assert.Len(t, refused["stepped"], 1)
				assert.Contains(t, refused["stepped"][0], fmt.Sprintf("above the key's version %d", 5+step))
				assert.Len(t, refused["tomb"], 1)
				assert.Len(t, letters, 3)
				if cfg.History > 0 {
					ids := []string{}
					for id := range e.docs("view_history") {
						ids = append(ids, id)
					}
					assert.ElementsMatch(t, []string{"pinned/5", "pinned/6", "stepped/5", fmt.Sprintf("stepped/%d", 5+step),
						"new/" + big, "tomb/10", "tomb/11"}, ids, "the history holds what applied")
				}

				// Later events step from what is stored.
				e.publish("pinned", `{"v":7,"s":"seven"}`)
				e.publish("new", `{"v":8,"s":"stale"}`)
				e.waitLag("orders-view", 20*time.Second)
				require.NoError(t, r.stop())
				docs = e.docs("view")
				assert.Equal(t, "seven", docs["pinned"]["s"])
				assert.Equal(t, "max", docs["new"]["s"])
			})
		}
	}
}

// TestMaxVersionStepSmall: with a small max_version_step, events of one batch are judged in
// stream order against the version before them: a jump is refused, and the events after it
// that are within the step of the stored version apply. UnboundedVersionStep removes the
// bound.
func TestMaxVersionStepSmall(t *testing.T) {
	for _, batch := range []int{1, 100} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			e := newEnv(t, "orders", 1)
			for _, v := range []int{5, 16, 15, 14, 30, 25, 26} {
				e.publish("a", fmt.Sprintf(`{"v":%d}`, v))
			}
			e.publish("b", `{"v":1}`)
			e.publish("b", `{"v":1000}`)
			cfg := e.config("orders-view")
			cfg.Version, cfg.BatchSize, cfg.MaxVersionStep = "/v", batch, 10
			r := start(t, e.changelog(cfg).Run)
			e.waitLag("orders-view", 20*time.Second)
			require.NoError(t, r.stop())
			docs := e.docs("view")
			// 5 applies; 16 is 11 above it: refused; 15 applies; 14 is stale; 30 is 15 above
			// 15: refused; 25 applies; 26 applies.
			assert.Equal(t, int64(26), docs["a"]["_v"])
			assert.Equal(t, int64(1), docs["b"]["_v"])
			var got []string
			for _, l := range e.letters() {
				got = append(got, l.Key)
				assert.Contains(t, l.Error, "more than max_version_step (10) above the key's version")
			}
			assert.Equal(t, []string{"a", "a", "b"}, got, "a's 16 and 30, b's 1000")

			cfg.MaxVersionStep = projection.UnboundedVersionStep
			e.publish("b", `{"v":1000}`)
			r = start(t, e.changelog(cfg).Run)
			e.waitLag("orders-view", 20*time.Second)
			require.NoError(t, r.stop())
			assert.Equal(t, int64(1000), e.docs("view")["b"]["_v"], "unbounded")
		})
	}
}
