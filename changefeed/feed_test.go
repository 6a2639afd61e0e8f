package changefeed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/changefeed"
)

// TestFormats: insert, update, replace and delete of documents with an ObjectId, a number
// and a string _id arrive in order, with canonical keys, in both formats.
func TestFormats(t *testing.T) {
	for _, format := range []changefeed.Format{changefeed.FormatDocument, changefeed.FormatEnvelope} {
		t.Run(string(format), func(t *testing.T) {
			e := newEnv(t, "shop.orders")
			ctx := t.Context()
			coll := e.db.Collection("orders")
			f := e.start(changefeed.Config{Name: "orders", Collection: "orders", Topic: "shop.orders", Format: format})
			waitRole(t, f, changefeed.RoleActive)
			require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "orders") != nil }, 10*time.Second, 10*time.Millisecond)

			oid := bson.NewObjectID()
			ids := []any{oid, int32(7), "cust-1"}
			keys := []string{oid.Hex(), "7", "cust-1"}
			// Each write waits for the event of the one before: an update's document is looked
			// up when the change is read (updateLookup), and must not see the replace after it.
			n := 0
			step := func(err error) {
				t.Helper()
				require.NoError(t, err)
				n++
				e.waitEvents("shop.orders", n)
			}
			for _, id := range ids {
				_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "v", Value: 1}})
				step(err)
				_, err = coll.UpdateByID(ctx, id, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 2}}}})
				step(err)
				_, err = coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "w", Value: 3}})
				step(err)
				_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
				step(err)
			}
			evs := e.waitEvents("shop.orders", 12)
			require.Len(t, evs, 12)
			groups := byKey(evs)
			for i, key := range keys {
				got := groups[key]
				require.Len(t, got, 4, "key %s", key)
				ops := []string{got[0].Op, got[1].Op, got[2].Op, got[3].Op}
				assert.Equal(t, []string{"insert", "update", "replace", "delete"}, ops, "order of key %s", key)
				for _, ev := range got {
					assert.Equal(t, e.db.Name()+".orders", ev.NS)
					assert.Contains(t, ev.ID, "orders:", "event ID from the resume token")
				}
				wantID := any(keys[i])
				if i == 1 {
					wantID = float64(7)
				}
				if format == changefeed.FormatDocument {
					assert.Equal(t, map[string]any{"_id": wantID, "v": float64(1)}, got[0].decoded(t))
					assert.Equal(t, map[string]any{"_id": wantID, "v": float64(2)}, got[1].decoded(t))
					assert.Equal(t, map[string]any{"_id": wantID, "w": float64(3)}, got[2].decoded(t))
					assert.JSONEq(t, "null", string(got[3].Payload), "a delete is a tombstone")
					continue
				}
				for j, op := range []string{"c", "u", "u", "d"} {
					env := got[j].decoded(t)
					assert.Equal(t, op, env["op"], "op %d", j)
					assert.Equal(t, key, env["key"])
					src := env["source"].(map[string]any)
					assert.Equal(t, map[string]any{"db": e.db.Name(), "coll": "orders"}, src["ns"])
					assert.NotNil(t, src["clusterTime"])
					assert.Equal(t, false, src["snapshot"])
				}
				assert.Equal(t, map[string]any{"_id": wantID, "v": float64(1)}, got[0].decoded(t)["after"])
				upd := got[1].decoded(t)
				assert.Equal(t, map[string]any{"_id": wantID, "v": float64(2)}, upd["after"])
				assert.Equal(t, map[string]any{"v": float64(2)}, upd["updateDescription"].(map[string]any)["updatedFields"])
				assert.Nil(t, got[3].decoded(t)["after"])
			}
		})
	}
}

// TestKeysOfLookAlikeIDs: documents whose _ids differ only in type — an ObjectId and the
// string of its hex, the number 7 and the string "7" — are two documents to MongoDB, and
// two keys: neither's events land on the other's key (its view document, its order).
func TestKeysOfLookAlikeIDs(t *testing.T) {
	e := newEnv(t, "shop.lookalike")
	ctx := t.Context()
	coll := e.db.Collection("lookalike")
	f := e.start(changefeed.Config{Name: "lookalike", Collection: "lookalike", Topic: "shop.lookalike"})
	waitRole(t, f, changefeed.RoleActive)
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "lookalike") != nil }, 10*time.Second, 10*time.Millisecond)

	oid := bson.NewObjectID()
	ids := []any{oid, oid.Hex(), int32(7), "7"}
	for i, id := range ids {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: i}})
		require.NoError(t, err, "MongoDB holds %v a new _id", id)
	}
	evs := e.waitEvents("shop.lookalike", len(ids))
	require.Len(t, evs, len(ids))
	got := map[string]float64{}
	for _, ev := range evs {
		got[ev.Key] = ev.decoded(t)["n"].(float64)
	}
	assert.Equal(t, map[string]float64{oid.Hex(): 0, `"` + oid.Hex() + `"`: 1, "7": 2, `"7"`: 3}, got,
		"four documents, four keys")
}
