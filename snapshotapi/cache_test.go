package snapshotapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
)

// served reads key and reports its status field and whether MongoDB was asked for it (not
// counting the lookups of the live collection).
func (a *api) served(key string) (string, bool) {
	a.t.Helper()
	count := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, f := range a.finds {
			if id, ok := f.Lookup("_id").StringValueOK(); ok && id == key {
				n++
			}
		}
		return n
	}
	before := count()
	r := a.get("/v1/views/orders/" + key)
	status := ""
	if r.StatusCode == 200 {
		status, _ = r.json(a.t)["status"].(string)
	}
	return status, count() > before
}

// TestCache: repeated reads come from memory; a change to a document, a missing document
// appearing, a dropped collection and a stream that falls behind all send reads back to
// MongoDB, so the cache never answers with a state older than its bound.
func TestCache(t *testing.T) {
	ctx := context.Background()
	a := newAPI(t, true)
	a.put("orders", doc("k", 1, t0, bson.D{{Key: "status", Value: "one"}}))
	eventually(t, func() bool { s, asked := a.served("k"); return s == "one" && !asked }, "cached")

	a.put("orders", doc("k", 2, t0, bson.D{{Key: "status", Value: "two"}}))
	eventually(t, func() bool { s, _ := a.served("k"); return s == "two" }, "a change drops the entry")
	eventually(t, func() bool { s, asked := a.served("k"); return s == "two" && !asked }, "cached again")

	t.Run("absence is cached until the document appears", func(t *testing.T) {
		eventually(t, func() bool { s, asked := a.served("new"); return s == "" && !asked }, "a cached 404")
		a.put("orders", doc("new", 1, t0, bson.D{{Key: "status", Value: "here"}}))
		eventually(t, func() bool { s, _ := a.served("new"); return s == "here" }, "the insert drops the 404")
	})
	t.Run("a deletion", func(t *testing.T) {
		_, err := a.db.Collection("orders").DeleteOne(ctx, bson.D{{Key: "_id", Value: "new"}})
		require.NoError(t, err)
		eventually(t, func() bool { return a.get("/v1/views/orders/new").StatusCode == 404 }, "gone")
	})
	t.Run("a dropped collection", func(t *testing.T) {
		eventually(t, func() bool { s, asked := a.served("k"); return s == "two" && !asked }, "cached")
		require.NoError(t, a.db.Collection("orders").Drop(ctx))
		eventually(t, func() bool { return a.get("/v1/views/orders/k").StatusCode == 404 }, "gone with its collection")
		a.put("orders", doc("k", 3, t0, bson.D{{Key: "status", Value: "three"}}))
		eventually(t, func() bool { s, asked := a.served("k"); return s == "three" && !asked }, "cached again")
	})
	t.Run("a stream that falls behind", func(t *testing.T) {
		eventually(t, func() bool { s, asked := a.served("k"); return s == "three" && !asked }, "cached")
		// Every getMore of the cache's stream held for 3 s: about a second after its last
		// answer the cache stops answering, with no write to tell it.
		embeddedtest.InjectMongoFault(t, a.db.Client(), embeddedtest.MongoFault{Commands: []string{"getMore"}, Block: 3 * time.Second, AppName: apiAppName})
		start := time.Now()
		eventually(t, func() bool { _, asked := a.served("k"); return asked }, "reads go to MongoDB")
		assert.Less(t, time.Since(start), 1500*time.Millisecond, "within the cache's staleness bound (1 s after the stream's last answer)")
		a.put("orders", doc("k", 4, t0, bson.D{{Key: "status", Value: "four"}}))
		s, asked := a.served("k")
		assert.Equal(t, "four", s)
		assert.True(t, asked)
	})
}
