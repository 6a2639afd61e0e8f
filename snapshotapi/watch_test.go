package snapshotapi_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWatchFromScratch: a watch without a position starts with the matching documents in
// key order, each rendered as the key route renders it, then synced with a position, then
// the changes: an update, a tombstone (a delete with its version) and a document removed
// from the collection (a delete without one).
func TestWatchFromScratch(t *testing.T) {
	a := newAPI(t, false)
	a.set("orders", "c", 3, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: 7.5}})
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "paid"}, {Key: "customer", Value: bson.D{{Key: "id", Value: "c1"}}}})
	a.set("orders", "b", 2, bson.D{{Key: "status", Value: "open"}})
	a.tombstone("orders", "d", 4)

	s := a.watch("/v1/views/orders?watch=true")
	for _, key := range []string{"a", "b", "c"} {
		e := s.next()
		require.Equal(t, "upsert", e.event)
		require.NotEmpty(t, e.id)
		p := e.payload(t)
		require.Equal(t, key, p.Key)
		r := a.get("/v1/views/orders/" + key)
		require.Equal(t, 200, r.StatusCode)
		assert.JSONEq(t, string(r.body), string(p.Doc), "rendered as the key route renders it")
		assert.Equal(t, r.Header.Get("ETag")[1:len(fmt.Sprint(p.version()))+1], fmt.Sprint(p.version()))
	}
	synced := s.next()
	require.Equal(t, "synced", synced.event)
	require.Regexp(t, `^[A-Za-z0-9_-]+$`, synced.id)

	a.set("orders", "b", 5, bson.D{{Key: "status", Value: "paid"}})
	e := s.next()
	require.Equal(t, "upsert", e.event)
	p := e.payload(t)
	assert.Equal(t, "b", p.Key)
	assert.EqualValues(t, 5, p.version())
	assert.JSONEq(t, `{"_id":"b","status":"paid"}`, string(p.Doc))

	a.tombstone("orders", "a", 6)
	e = s.next()
	require.Equal(t, "delete", e.event)
	p = e.payload(t)
	assert.Equal(t, "a", p.Key)
	assert.EqualValues(t, 6, p.version())
	assert.Nil(t, p.Doc)

	a.remove("orders", "c")
	e = s.next()
	require.Equal(t, "delete", e.event)
	assert.JSONEq(t, `{"key":"c"}`, e.data, "a removed document has no version")

	t.Run("slim renders its fields only", func(t *testing.T) {
		s := a.watch("/v1/views/slim?watch=true&meta=1")
		e := s.next()
		require.Equal(t, "upsert", e.event)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(e.payload(t).Doc, &doc))
		r := a.get("/v1/views/slim/b?meta=1")
		assert.JSONEq(t, string(r.body), string(e.payload(t).Doc))
	})
}

// TestWatchSinceListPosition: a client pages the list, then watches with since= the
// position the list reflected: it gets every change made after the list was read, none
// older than what the list showed, and no snapshot.
func TestWatchSinceListPosition(t *testing.T) {
	a := newAPI(t, false)
	for i := range 10 {
		a.set("orders", fmt.Sprintf("k%02d", i), 1, bson.D{{Key: "status", Value: "open"}})
	}
	r := a.get("/v1/views/orders?limit=5")
	require.Equal(t, 200, r.StatusCode)
	pos := r.Header.Get("Jetbus-Position")
	require.NotEmpty(t, pos)
	seen := map[string]int64{}
	for _, it := range r.json(t)["items"].([]any) {
		seen[it.(map[string]any)["_id"].(string)] = 1
	}
	// Changes while the client pages on, and after.
	a.set("orders", "k01", 2, bson.D{{Key: "status", Value: "paid"}})
	a.set("orders", "k07", 2, bson.D{{Key: "status", Value: "paid"}})
	a.set("orders", "k10", 1, bson.D{{Key: "status", Value: "new"}})

	s := a.watch("/v1/views/orders?watch=true&since=" + pos)
	got := map[string]int64{}
	for range 3 {
		e := s.next()
		require.Equal(t, "upsert", e.event, "no snapshot, no synced: only changes")
		p := e.payload(t)
		require.Greater(t, p.version(), got[p.Key], "versions of a key increase")
		got[p.Key] = p.version()
	}
	assert.Equal(t, map[string]int64{"k01": 2, "k07": 2, "k10": 1}, got)
	a.set("orders", "k01", 3, bson.D{{Key: "status", Value: "shipped"}})
	e := s.next()
	assert.Equal(t, "k01", e.payload(t).Key)
	assert.EqualValues(t, 3, e.payload(t).version())
}

// TestWatchResume: a client that reconnects with Last-Event-ID (which wins over the since
// of the URL it reuses, as EventSource does) gets exactly the changes after its last
// event: none twice, none missed — from a change's id, from synced's, and from an id in
// the middle of the snapshot.
func TestWatchResume(t *testing.T) {
	a := newAPI(t, false)
	for i := range 6 {
		a.set("orders", fmt.Sprintf("k%d", i), 1, nil)
	}
	s := a.watch("/v1/views/orders?watch=true")
	var ids []string
	for range 6 {
		e := s.next()
		ids = append(ids, e.id)
	}
	synced := s.next()
	require.Equal(t, "synced", synced.event)

	t.Run("in the middle of the snapshot", func(t *testing.T) {
		r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", ids[2])
		for i := 3; i < 6; i++ {
			e := r.next()
			require.Equal(t, "upsert", e.event)
			assert.Equal(t, fmt.Sprintf("k%d", i), e.payload(t).Key)
		}
		assert.Equal(t, "synced", r.next().event)
	})

	a.set("orders", "k1", 2, nil)
	a.set("orders", "k2", 2, nil)
	e1 := s.next()
	require.Equal(t, "k1", e1.payload(t).Key)
	s.close()
	a.set("orders", "k3", 2, nil)
	a.set("orders", "k1", 3, nil)

	r := a.watch("/v1/views/orders?watch=true&since="+synced.id, "Last-Event-ID", e1.id)
	var got []string
	for range 3 {
		p := r.next().payload(t)
		got = append(got, fmt.Sprintf("%s@%d", p.Key, p.version()))
	}
	assert.Equal(t, []string{"k2@2", "k3@2", "k1@3"}, got)

	// From synced: k1's version 2 was replaced before this watch read its change, so only
	// the change that wrote version 3 carries k1.
	fromSynced := a.watch("/v1/views/orders?watch=true&since=" + synced.id)
	got = nil
	for range 3 {
		p := fromSynced.next().payload(t)
		got = append(got, fmt.Sprintf("%s@%d", p.Key, p.version()))
	}
	assert.Equal(t, []string{"k2@2", "k3@2", "k1@3"}, got)
}

// TestWatchFilter: a filtered watch starts with the matching documents only; a document
// that stops matching is a delete for it, one that starts matching an upsert, and changes
// of documents that never matched do not reach it.
func TestWatchFilter(t *testing.T) {
	a := newAPI(t, false)
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: int64(5)}})
	a.set("orders", "b", 1, bson.D{{Key: "status", Value: "open"}, {Key: "total", Value: int64(50)}})
	s := a.watch("/v1/views/orders?watch=true&status=eq.paid&total=lt.20")
	e := s.next()
	require.Equal(t, "upsert", e.event)
	assert.Equal(t, "a", e.payload(t).Key)
	require.Equal(t, "synced", s.next().event)

	a.set("orders", "b", 2, bson.D{{Key: "status", Value: "open"}, {Key: "total", Value: int64(50)}, {Key: "note", Value: "x"}}) // never matched: nothing
	a.set("orders", "a", 2, bson.D{{Key: "status", Value: "open"}, {Key: "total", Value: int64(5)}})                             // leaves
	e = s.next()
	require.Equal(t, "delete", e.event)
	assert.Equal(t, "a", e.payload(t).Key)
	assert.EqualValues(t, 2, e.payload(t).version())

	a.set("orders", "b", 3, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: int64(10)}}) // enters
	e = s.next()
	require.Equal(t, "upsert", e.event)
	assert.Equal(t, "b", e.payload(t).Key)
	assert.EqualValues(t, 3, e.payload(t).version())

	a.set("orders", "b", 4, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: int64(11)}}) // stays
	e = s.next()
	require.Equal(t, "upsert", e.event)
	assert.EqualValues(t, 4, e.payload(t).version())

	a.tombstone("orders", "b", 5)
	e = s.next()
	require.Equal(t, "delete", e.event)
	assert.EqualValues(t, 5, e.payload(t).version())
}
