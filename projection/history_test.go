package projection_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
)

// TestHistory: with History set, every applied version of a key is in <collection>_history
// ({_id: "<key>/<_v>", _key, _v, _ts, doc}, doc null for a delete) with the documented
// indexes; a version the guard refused is not, and a replay from the earliest event rewrites
// the same documents instead of adding any.
func TestHistory(t *testing.T) {
	for _, batch := range []int{1, 100} {
		t.Run(map[int]string{1: "one event per batch", 100: "coalesced"}[batch], func(t *testing.T) {
			e := newEnv(t, "orders", 1)
			e.publish("a", `{"v":1,"s":"new"}`)
			e.publish("a", `{"v":3,"s":"paid"}`)
			e.publish("a", `{"v":2,"s":"stale"}`) // older than the stored version: not applied
			e.publish("a", `null`, jetbus.WithHeaders(map[string]string{"x-version": "4"}))
			e.publish("b", `{"v":1,"s":"new"}`)
			cfg := e.config("orders-view")
			cfg.Version, cfg.History, cfg.BatchSize = "/v", time.Hour, batch
			run := func() {
				r := start(t, e.changelog(cfg).Run)
				e.waitLag("orders-view", 20*time.Second)
				require.NoError(t, r.stop())
			}
			run()

			hist := e.docs("view_history")
			ids := make([]string, 0, len(hist))
			for id := range hist {
				ids = append(ids, id)
			}
			assert.ElementsMatch(t, []string{"a/1", "a/3", "a/4", "b/1"}, ids)
			a3 := hist["a/3"]
			assert.Equal(t, "a", a3["_key"])
			assert.Equal(t, int64(3), a3["_v"])
			assert.IsType(t, bson.DateTime(0), a3["_ts"])
			raw, err := bson.Marshal(a3["doc"])
			require.NoError(t, err, "doc is the view document: %v", a3["doc"])
			var doc bson.M
			require.NoError(t, bson.Unmarshal(raw, &doc))
			assert.Equal(t, "paid", doc["s"])
			assert.Equal(t, int64(3), doc["_v"])
			assert.NotContains(t, doc, "_id")
			assert.Nil(t, hist["a/4"]["doc"], "a delete's history document has doc null")

			ctx := context.Background()
			cur, err := e.db.Collection("view_history").Indexes().List(ctx)
			require.NoError(t, err)
			var idx []bson.M
			require.NoError(t, cur.All(ctx, &idx))
			var ttl, byKey bool
			for _, ix := range idx {
				var keys []string
				for _, k := range ix["key"].(bson.D) {
					keys = append(keys, k.Key)
				}
				if len(keys) == 3 && keys[0] == "_key" {
					byKey = true
				}
				if exp, ok := ix["expireAfterSeconds"]; ok {
					ttl = true
					assert.EqualValues(t, 3600, exp)
					assert.Contains(t, keys, "_ts")
				}
			}
			assert.True(t, byKey, "an index on _key, _ts, _v")
			assert.True(t, ttl, "a TTL index on _ts")

			// Replay from the earliest event: the same history, nothing added.
			require.NoError(t, e.bus.SetCursor(ctx, e.topic, "orders-view", jetbus.Earliest()))
			run()
			n, err := e.db.Collection("view_history").CountDocuments(ctx, bson.D{}, options.Count())
			require.NoError(t, err)
			assert.Equal(t, int64(4), n)
		})
	}
}
