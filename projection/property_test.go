package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/projection"
)

// folded is the model's state of one key: the fold of its events in stream order, each
// applied only when its version is greater than the one before (the version guard).
type folded struct {
	ver     int64
	has     bool // some event applied
	deleted bool
	fields  map[string]int64
}

// genEvent is one generated event: its key, payload (nil: tombstone) and version when the
// projection reads it from the payload.
type genEvent struct {
	key     string
	payload map[string]any
	ver     int64
}

// TestChangelogProperty: random streams — out-of-order payload versions, exact duplicates
// (redeliveries of an event), tombstones, versions jumping past max_version_step — applied in
// random batch sizes, stopped at a random point and restarted, then replayed from the
// earliest event: the view always equals the fold of the stream under the version guard, and
// the dead letters are the events the fold refused.
func TestChangelogProperty(t *testing.T) {
	cases := []struct {
		name    string
		mode    projection.Mode
		tomb    projection.Tombstones
		version string
		step    int64 // max_version_step; the stream jumps past it
	}{
		{"replace, sequence versions", projection.Replace, projection.DeleteTombstones, "", 0},
		{"merge, sequence versions, keep tombstones", projection.Merge, projection.KeepTombstones, "", 0},
		{"replace, payload versions out of order", projection.Replace, projection.DeleteTombstones, "/v", 0},
		{"merge, payload versions out of order", projection.Merge, projection.DeleteTombstones, "/v", 0},
		{"merge, payload versions, keep tombstones", projection.Merge, projection.KeepTombstones, "/v", 0},
		{"replace, payload versions jumping", projection.Replace, projection.DeleteTombstones, "/v", 8},
		{"merge, payload versions jumping, keep tombstones", projection.Merge, projection.KeepTombstones, "/v", 8},
	}
	seeds := []uint64{1, 2}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, tc := range cases {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed %d", tc.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(len(tc.name))))
				e := newEnv(t, "orders", 2)
				evs := generate(rng, 300, 8, tc.version != "", tc.step)
				vers := map[int]int64{}
				for i, ev := range evs {
					var opts []jetbus.PublishOption
					payload := "null"
					if ev.payload != nil {
						b, err := json.Marshal(ev.payload)
						require.NoError(t, err)
						payload = string(b)
					} else if tc.version != "" {
						opts = append(opts, jetbus.WithHeaders(map[string]string{projection.VersionHeader: strconv.FormatInt(ev.ver, 10)}))
					}
					pub := e.publish(ev.key, payload, opts...)
					vers[i] = ev.ver
					if tc.version == "" {
						vers[i] = int64(pub.Seq)
					}
				}
				want := map[string]*folded{}
				refused := map[int]bool{} // events the step refused
				fold(want, refused, evs, vers, tc.mode, tc.step)

				cfg := e.config("orders-view")
				cfg.Mode, cfg.Tombstones, cfg.Version, cfg.MaxVersionStep = tc.mode, tc.tomb, tc.version, tc.step
				run := func(batch int, until func() bool) {
					cfg.BatchSize, cfg.Linger = batch, time.Duration(rng.IntN(5)+1)*time.Millisecond
					r := start(t, e.changelog(cfg).Run)
					require.Eventually(t, until, 30*time.Second, 5*time.Millisecond)
					require.NoError(t, r.stop())
				}
				caughtUp := func() bool {
					c, err := e.bus.Cursor(context.Background(), e.topic, "orders-view")
					return err == nil && len(c.Partitions) == 2 && c.Lag() == 0
				}
				// Stopped part-way (whatever it held is written or delivered again), restarted
				// with another batch size, then replayed from the earliest event.
				stopAt := uint64(rng.IntN(len(evs)))
				run(1+rng.IntN(64), func() bool {
					c, err := e.bus.Cursor(context.Background(), e.topic, "orders-view")
					if err != nil {
						return false
					}
					var acked uint64
					for _, p := range c.Partitions {
						acked += p.AckFloor
					}
					return acked >= stopAt || c.Lag() == 0
				})
				run(1+rng.IntN(64), caughtUp)
				assertFold(t, want, e.docs("view"), tc.tomb)
				assert.Len(t, e.letters(), len(refused), "dead letters")
				// A replay judges every event again over what is stored now; an event
				// refused again is one dead letter (its ID is the event's).
				fold(want, refused, evs, vers, tc.mode, tc.step)
				require.NoError(t, e.bus.SetCursor(context.Background(), e.topic, "orders-view", jetbus.Earliest()))
				run(1+rng.IntN(64), caughtUp)
				assertFold(t, want, e.docs("view"), tc.tomb)
				assert.Len(t, e.letters(), len(refused), "dead letters after the replay")
				if tc.step > 0 {
					assert.NotEmpty(t, refused, "the stream jumped")
				}
			})
		}
	}
}

// generate returns n events over keys keys: payloads of fields a, b, c (integers, or null to
// unset in merge mode), a tenth tombstones, a tenth exact copies of an earlier event of the
// key. With payload versions each key's versions come in a shuffled order; with a step, an
// eighth jump more than step above the key's versions so far.
func generate(rng *rand.Rand, n, keys int, payloadVersions bool, step int64) []genEvent {
	var evs []genEvent
	next := map[string]int64{}
	for range n {
		key := "k" + strconv.Itoa(rng.IntN(keys))
		if rng.IntN(10) == 0 {
			// A redelivery: the same event again.
			for i := len(evs) - 1; i >= 0; i-- {
				if evs[i].key == key {
					evs = append(evs, evs[i])
					break
				}
			}
			continue
		}
		next[key] += int64(1 + rng.IntN(3))
		ev := genEvent{key: key, ver: next[key]}
		if payloadVersions && rng.IntN(3) == 0 {
			ev.ver = max(1, ev.ver-int64(rng.IntN(6))) // older than some before it
		}
		if step > 0 && rng.IntN(8) == 0 {
			ev.ver = next[key] + step + 1 + rng.Int64N(step) // the next ones do not follow it
		}
		if rng.IntN(10) != 0 {
			ev.payload = map[string]any{}
			for _, f := range []string{"a", "b", "c"} {
				switch rng.IntN(4) {
				case 0:
				case 1:
					ev.payload[f] = nil
				default:
					ev.payload[f] = rng.IntN(100)
				}
			}
			if payloadVersions {
				ev.payload["v"] = ev.ver
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// fold applies evs in stream order (vers[i] is event i's version) to out under the version
// guard and, with a step, max_version_step, adding the events the step refused to refused.
func fold(out map[string]*folded, refused map[int]bool, evs []genEvent, vers map[int]int64, mode projection.Mode, step int64) {
	for i, ev := range evs {
		st := out[ev.key]
		if st == nil {
			st = &folded{}
			out[ev.key] = st
		}
		v := vers[i]
		if st.has && v <= st.ver {
			continue
		}
		if step > 0 && st.has && v-st.ver > step {
			refused[i] = true
			continue
		}
		st.ver, st.has = v, true
		if ev.payload == nil {
			st.deleted, st.fields = true, nil
			continue
		}
		if mode == projection.Replace || st.deleted || st.fields == nil {
			st.fields = map[string]int64{}
		}
		st.deleted = false
		for f, x := range ev.payload {
			switch {
			case f == "v":
			case x == nil && mode == projection.Merge:
				delete(st.fields, f)
			case x == nil:
			default:
				st.fields[f] = toInt(x)
			}
		}
		if mode == projection.Replace {
			// null fields are stored as null in replace mode: keep them as a marker value.
			for f, x := range ev.payload {
				if x == nil && f != "v" {
					st.fields[f] = nullField
				}
			}
		}
	}
}

// nullField stands for a field stored as BSON null.
const nullField = -1 << 62

func toInt(x any) int64 {
	switch n := x.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	}
	panic(fmt.Sprintf("unexpected %T", x))
}

func assertFold(t *testing.T, want map[string]*folded, docs map[string]bson.M, tomb projection.Tombstones) {
	t.Helper()
	for key, st := range want {
		doc, ok := docs[key]
		if st.deleted {
			if tomb == projection.KeepTombstones {
				require.True(t, ok, "%s: marker missing", key)
			}
			if ok {
				assert.Equal(t, true, doc["_deleted"], "%s is deleted", key)
				assert.Equal(t, st.ver, doc["_v"], "%s: version of the marker", key)
			}
			continue
		}
		require.True(t, ok, "%s missing", key)
		assert.Equal(t, st.ver, doc["_v"], "%s: version", key)
		got := map[string]int64{}
		for f, x := range maps.All(doc) {
			switch f {
			case "_id", "_v", "_ts", "_topic", "v":
				continue
			}
			if x == nil {
				got[f] = nullField
				continue
			}
			n, isInt := x.(int64)
			require.True(t, isInt, "%s.%s = %v (%T)", key, f, x, x)
			got[f] = n
		}
		assert.Equal(t, st.fields, got, "%s: fields (version %d)", key, st.ver)
	}
	assert.Len(t, docs, len(want), "no other keys")
}
