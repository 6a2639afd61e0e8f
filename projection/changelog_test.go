package projection_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
	"github.com/jetbus/jetbus/projection"
)

// published is one event of a case: key, payload, and optional headers.
type published struct {
	key, payload string
	headers      map[string]string
}

// TestChangelogModes: what each mode and tombstone policy leaves in the view, one batch at a
// time (BatchSize 1) and coalesced in one batch (BatchSize 100).
func TestChangelogModes(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(*projection.Config)
		events []published
		want   map[string]bson.M // without _ts and _topic; nil value: absent
	}{
		{"replace: last state wins", nil, []published{
			{key: "a", payload: `{"s":"new","t":1}`}, {key: "a", payload: `{"s":"paid"}`}, {key: "b", payload: `{"s":"new"}`},
		}, map[string]bson.M{"a": {"s": "paid", "_v": int64(2)}, "b": {"s": "new", "_v": int64(3)}}},
		{"replace: tombstone deletes", nil, []published{
			{key: "a", payload: `{"s":"new"}`}, {key: "a", payload: `null`}, {key: "b", payload: `{"s":1}`},
		}, map[string]bson.M{"a": nil, "b": {"s": int64(1), "_v": int64(3)}}},
		{"replace: tombstone then recreate", nil, []published{
			{key: "a", payload: `{"s":"new"}`}, {key: "a", payload: `null`}, {key: "a", payload: `{"s":"again"}`},
		}, map[string]bson.M{"a": {"s": "again", "_v": int64(3)}}},
		{"replace: keep tombstones", func(c *projection.Config) { c.Tombstones = projection.KeepTombstones }, []published{
			{key: "a", payload: `{"s":"new"}`}, {key: "a", payload: `null`},
		}, map[string]bson.M{"a": {"_deleted": true, "_v": int64(2)}}},
		{"merge: fields set and unset", func(c *projection.Config) { c.Mode = projection.Merge }, []published{
			{key: "a", payload: `{"s":"new","t":1,"u":true}`}, {key: "a", payload: `{"s":"paid","u":null}`}, {key: "a", payload: `{"v":[1]}`},
		}, map[string]bson.M{"a": {"s": "paid", "t": int64(1), "v": bson.A{int64(1)}, "_v": int64(3)}}},
		{"merge: tombstone resets", func(c *projection.Config) { c.Mode = projection.Merge }, []published{
			{key: "a", payload: `{"s":"new","t":1}`}, {key: "a", payload: `null`}, {key: "a", payload: `{"u":2}`},
		}, map[string]bson.M{"a": {"u": int64(2), "_v": int64(3)}}},
		{"merge: keep tombstones, then merge undeletes", func(c *projection.Config) {
			c.Mode, c.Tombstones = projection.Merge, projection.KeepTombstones
		}, []published{
			{key: "a", payload: `{"s":"new"}`}, {key: "a", payload: `null`}, {key: "a", payload: `{"u":2}`}, {key: "b", payload: `{"x":1}`}, {key: "b", payload: `null`},
		}, map[string]bson.M{"a": {"u": int64(2), "_v": int64(3)}, "b": {"_deleted": true, "_v": int64(5)}}},
		{"version from the payload: older versions never overwrite", func(c *projection.Config) { c.Version = "/version" }, []published{
			{key: "a", payload: `{"version":5,"s":"five"}`}, {key: "a", payload: `{"version":3,"s":"three"}`}, {key: "b", payload: `{"version":1}`}, {key: "b", payload: `{"version":2}`},
		}, map[string]bson.M{"a": {"s": "five", "version": int64(5), "_v": int64(5)}, "b": {"version": int64(2), "_v": int64(2)}}},
		{"version from the payload: merge skips an older event", func(c *projection.Config) { c.Version, c.Mode = "/v", projection.Merge }, []published{
			{key: "a", payload: `{"v":2,"s":"two"}`}, {key: "a", payload: `{"v":1,"old":true}`}, {key: "a", payload: `{"v":3,"t":3}`},
		}, map[string]bson.M{"a": {"s": "two", "t": int64(3), "v": int64(3), "_v": int64(3)}}},
		{"version from the payload: tombstone versioned by header", func(c *projection.Config) { c.Version = "/v" }, []published{
			{key: "a", payload: `{"v":2}`}, {key: "a", payload: `null`, headers: map[string]string{"x-version": "3"}}, {key: "a", payload: `{"v":1}`},
			{key: "b", payload: `{"v":5}`}, {key: "b", payload: `null`, headers: map[string]string{"x-version": "4"}},
		}, map[string]bson.M{"a": nil, "b": {"v": int64(5), "_v": int64(5)}}},
	}
	for _, tc := range cases {
		for _, batch := range []int{1, 100} {
			t.Run(tc.name+"/batch "+map[int]string{1: "1", 100: "100"}[batch], func(t *testing.T) {
				e := newEnv(t, "orders", 2)
				for _, p := range tc.events {
					var opts []jetbus.PublishOption
					if p.headers != nil {
						opts = append(opts, jetbus.WithHeaders(p.headers))
					}
					e.publish(p.key, p.payload, opts...)
				}
				cfg := e.config("orders-view")
				cfg.BatchSize = batch
				if tc.cfg != nil {
					tc.cfg(&cfg)
				}
				r := start(t, e.changelog(cfg).Run)
				e.waitLag("orders-view", 20*time.Second)
				require.NoError(t, r.stop())
				docs := e.docs("view")
				for key, want := range tc.want {
					got, ok := docs[key]
					if want == nil {
						assert.True(t, !ok || got["_deleted"] == true, "%s should be absent or a marker, is %v", key, got)
						continue
					}
					require.True(t, ok, "%s missing", key)
					assert.Equal(t, "orders", got["_topic"])
					assert.IsType(t, bson.DateTime(0), got["_ts"])
					delete(got, "_topic")
					delete(got, "_ts")
					want["_id"] = key
					assert.Equal(t, want, got, key)
				}
				assert.Empty(t, e.letters())
			})
		}
	}
}

// TestStoppedBeforeWaitingIsNotAFailure: a projection whose subscribers ended and whose
// context was done before Run waited on either returns nil. Run used to take either at
// random, and a subscriber stopped by the context read as one whose connection closed.
func TestStoppedBeforeWaitingIsNotAFailure(t *testing.T) {
	e := newEnv(t, "orders", 2)
	for i := range 16 {
		ctx, cancel := context.WithCancel(context.Background())
		c := e.changelog(e.config("orders-view"), projection.WithWaitHook(func(subs []*partition.Subscriber, reported func() int) {
			for _, s := range subs {
				_ = s.Stop()
			}
			// assert, not require: this runs on Run's goroutine, which must go on to cancel.
			assert.Eventually(t, func() bool { return reported() == len(subs) }, 10*time.Second, time.Millisecond)
			cancel()
		}))
		require.NoError(t, c.Run(ctx), "run %d", i)
		cancel()
	}
}

// TestFailureAtStopIsReported: a projection whose subscriber failed (its NATS connection
// closed) as its context ended returns the failure, whichever of the two Run sees first.
func TestFailureAtStopIsReported(t *testing.T) {
	e := newEnv(t, "orders", 2)
	for i := range 8 {
		ctx, cancel := context.WithCancel(context.Background())
		bus := embeddedtest.Bus(t, e.url)
		c, err := projection.NewChangelog(bus, e.db.Client(), e.q, e.config("orders-view"), projection.WithLogger(embeddedtest.Logger(t)),
			projection.WithWaitHook(func(subs []*partition.Subscriber, reported func() int) {
				bus.Conn().Close()
				assert.Eventually(t, func() bool { return reported() == len(subs) }, 10*time.Second, time.Millisecond)
				cancel()
			}))
		require.NoError(t, err)
		require.ErrorIs(t, c.Run(ctx), jetbus.ErrClosed, "run %d", i)
		cancel()
	}
}
