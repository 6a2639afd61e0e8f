package changefeed_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/embeddedtest"
)

// seed inserts n documents {_id: i, v: "orig"}.
func seed(t *testing.T, coll *mongo.Collection, ids []any) {
	t.Helper()
	docs := make([]any, len(ids))
	for i, id := range ids {
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "v", Value: "orig"}}
	}
	for len(docs) > 0 {
		n := min(len(docs), 500)
		_, err := coll.InsertMany(t.Context(), docs[:n])
		require.NoError(t, err)
		docs = docs[n:]
	}
}

func intIDs(from, n int) []any {
	ids := make([]any, n)
	for i := range ids {
		ids[i] = int32(from + i)
	}
	return ids
}

// checkFinalState asserts that the last event of every key of topic is the document as it is
// now in coll (a tombstone for a document that is gone), and that every document has one.
func checkFinalState(t *testing.T, e *env, topic string, coll *mongo.Collection) {
	t.Helper()
	cur, err := coll.Find(t.Context(), bson.D{})
	require.NoError(t, err)
	want := map[string]map[string]any{}
	for cur.Next(t.Context()) {
		id := cur.Current.Lookup("_id")
		key, err := changefeed.Key(id)
		require.NoError(t, err)
		var doc map[string]any
		js, err := bson.MarshalExtJSON(cur.Current, false, false)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(js, &doc))
		delete(doc, "_id")
		want[key] = doc
	}
	require.NoError(t, cur.Err())
	last := map[string]event{}
	for _, ev := range e.events(topic) {
		last[ev.Key] = ev
	}
	for key, doc := range want {
		ev, ok := last[key]
		require.True(t, ok, "document %s has an event", key)
		got := ev.decoded(t)
		delete(got, "_id")
		require.Equal(t, doc, got, "last event of %s is the document's final state", key)
	}
	for key, ev := range last {
		if _, ok := want[key]; !ok {
			require.JSONEq(t, "null", string(ev.Payload), "a deleted document %s ends with a tombstone", key)
		}
	}
}

// TestCopyExisting: a feed that starts with copy_existing publishes every document (ids of
// several BSON types, in _id order), reports its progress, then streams the changes made
// during the copy: every document ends in the topic with its latest state.
func TestCopyExisting(t *testing.T) {
	e := newEnv(t, "copy.items")
	ctx := t.Context()
	coll := e.db.Collection("items")
	ids := intIDs(0, 200)
	for i := range 25 {
		ids = append(ids, fmt.Sprintf("s%02d", i), bson.NewObjectID())
	}
	seed(t, coll, ids)
	reg := prometheus.NewRegistry()
	f := e.start(changefeed.Config{Name: "copy", Collection: "items", Topic: "copy.items", Start: changefeed.StartCopyExisting,
		CopyBatchSize: 20, MaxInFlight: 10}, changefeed.WithRegisterer(reg))
	// Changes during the copy, once it began: the copy saves its position, with the stream's
	// start point, before it reads a document. (A change made before that is no change during
	// the copy: the copy reads its result, and the stream never sees it — on a loaded machine
	// the feed's start could come after every change below.)
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "copy") != nil },
		30*time.Second, 5*time.Millisecond, "the copy begins")
	for i := range 50 {
		_, err := coll.UpdateByID(ctx, int32(i), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "changed"}}}})
		require.NoError(t, err)
	}
	_, err := coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: 50}, {Key: "$lt", Value: 60}}}})
	require.NoError(t, err)
	seed(t, coll, intIDs(1000, 10))
	_, err = coll.UpdateByID(ctx, ids[201], bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "changed"}}}})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		p := savedPosition(t, e.bus.JetStream(), "copy")
		return p != nil && p.Phase == changefeed.PhaseStream
	}, 30*time.Second, 10*time.Millisecond, "the copy ends")
	lastKey := ids[201].(bson.ObjectID).Hex()
	require.Eventually(t, func() bool {
		evs := byKey(e.events("copy.items"))[lastKey]
		return len(evs) > 0 && evs[len(evs)-1].Op == "update"
	}, 30*time.Second, 10*time.Millisecond, "the last change made during the copy is published")
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, changefeed.PhaseStream, st.(changefeed.Status).Position.Phase)
	checkFinalState(t, e, "copy.items", coll)

	reads := 0
	for _, ev := range e.events("copy.items") {
		if ev.Op == "read" {
			reads++
			assert.Contains(t, ev.ID, "copy:copy:", "copy event IDs")
		}
	}
	assert.GreaterOrEqual(t, reads, 240, "every document present when the copy read it")
	assert.Equal(t, float64(reads), metricValue(t, reg, "changefeed_copy_documents_total"), "progress: documents copied")
	assert.Equal(t, 1.0, metricValue(t, reg, "changefeed_copy_progress_ratio"), "progress: done")
}

// metricValue returns the value of the one series of family name on reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestCopyKilledHalfway: the process running a copy is killed with SIGKILL halfway; the next
// one continues where the copy stopped (its progress never goes back, the epoch is kept),
// and every document ends in the topic with its final state.
func TestCopyKilledHalfway(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 1000
	}
	e := newEnv(t, "copykill.items")
	ctx := t.Context()
	coll := e.db.Collection("items")
	seed(t, coll, intIDs(0, n))
	uri := embeddedtest.MongoURI(t)
	// Slow the copy's reads so that it can be killed halfway.
	embeddedtest.InjectMongoFault(t, e.db.Client(), embeddedtest.MongoFault{Commands: []string{"getMore"}, Block: 40 * time.Millisecond, AppName: "copy-feed"})
	spec := childSpec{NATS: e.nats.ClientURL(), Mongo: uri, AppName: "copy-feed", Feed: &changefeed.Config{
		Name: "copykill", Database: e.db.Name(), Collection: "items", Topic: "copykill.items",
		Start: changefeed.StartCopyExisting, CopyBatchSize: 50, LeaseTTL: time.Second, SaveInterval: 50 * time.Millisecond,
	}}
	c := startChild(t, spec)
	var atKill *changefeed.Position
	require.Eventually(t, func() bool {
		atKill = savedPosition(t, e.bus.JetStream(), "copykill")
		return atKill != nil && atKill.Copy != nil && atKill.Copy.Copied >= int64(n/3)
	}, 60*time.Second, 5*time.Millisecond, "a third copied")
	c.Kill()
	atKill = savedPosition(t, e.bus.JetStream(), "copykill")
	require.Equal(t, changefeed.PhaseCopy, atKill.Phase, "killed during the copy")
	t.Logf("killed with %d of %d copied", atKill.Copy.Copied, atKill.Copy.Total)

	// Changes while no process runs, and while the next one copies.
	for i := 0; i < n; i += 10 {
		_, err := coll.UpdateByID(ctx, int32(i), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "changed"}}}})
		require.NoError(t, err)
	}
	_, err := coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$mod", Value: bson.A{7, 3}}}}})
	require.NoError(t, err)
	c = startChild(t, spec)
	var seen []changefeed.CopyState // the copy's progress as saved, while it runs
	require.Eventually(t, func() bool {
		p := savedPosition(t, e.bus.JetStream(), "copykill")
		if p.Copy != nil {
			seen = append(seen, *p.Copy)
		}
		return p.Phase == changefeed.PhaseStream
	}, 60*time.Second, 10*time.Millisecond, "the copy ends")
	require.NotEmpty(t, seen, "progress saved while the second process copies")
	for _, cp := range seen {
		require.Equal(t, atKill.Copy.Epoch, cp.Epoch, "the same copy continues")
		require.GreaterOrEqual(t, cp.Copied, atKill.Copy.Copied, "progress never goes back")
	}
	_, err = coll.UpdateByID(ctx, int32(1), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "last"}}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		last := ""
		for _, ev := range e.events("copykill.items") {
			if ev.Key == "1" {
				last = string(ev.Payload)
			}
		}
		return last == `{"_id":1,"v":"last"}`
	}, 60*time.Second, 50*time.Millisecond, "streaming after the copy")
	checkFinalState(t, e, "copykill.items", coll)
	c.stop()
}
