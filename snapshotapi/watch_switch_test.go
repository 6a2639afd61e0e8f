package snapshotapi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// switchTo makes coll the view's live collection, as a rebuild's switch does.
func (a *api) switchTo(coll string, gen int) {
	a.t.Helper()
	_, err := a.db.Collection(snapshotapi.ProjectionsCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "orders-view"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "generation", Value: gen}, {Key: "collection", Value: coll}, {Key: "group", Value: fmt.Sprintf("orders-view-g%d", gen)},
			{Key: "switched", Value: bson.NewDateTimeFromTime(time.Now())}}}}, options.UpdateOne().SetUpsert(true))
	require.NoError(a.t, err)
}

// follower reads a watch's events and checks what the guarantees say of them: per key the
// versions only increase; it keeps each key's state.
type follower struct {
	t     *testing.T
	state map[string]int64 // version held (deleted keys: negative)
	last  map[string]int64 // last version received
}

func newFollower(t *testing.T) *follower {
	return &follower{t: t, state: map[string]int64{}, last: map[string]int64{}}
}

func (f *follower) take(e sseEvent) {
	f.t.Helper()
	if e.event != "upsert" && e.event != "delete" {
		return
	}
	p := e.payload(f.t)
	if v := p.version(); v >= 0 {
		require.Greater(f.t, v, f.last[p.Key], "key %s went from %d to %d (%s)", p.Key, f.last[p.Key], v, e.event)
		f.last[p.Key] = v
	}
	if e.event == "upsert" {
		f.state[p.Key] = p.version()
	} else {
		delete(f.state, p.Key)
	}
}

// until reads s until cond holds of the follower's state.
func (f *follower) until(s *stream, cond func(map[string]int64) bool) {
	f.t.Helper()
	for !cond(f.state) {
		f.take(s.next())
	}
}

// TestWatchFollowsRebuild: after a rebuild's switch a watch goes on with the new
// generation: the old generation's changes up to the switch, then what differs in the new
// one (a key ahead, one it lacks, one deleted, one new), then its changes — per key the
// versions only increase, and a version the client had is not sent again. A client that
// resumes with a position of the old generation, or one within the switch, ends the same.
func TestWatchFollowsRebuild(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.KeepAlive = 100 * time.Millisecond }))
	for k := range 6 {
		a.set("orders", fmt.Sprintf("k%d", k), 1, bson.D{{Key: "status", Value: "paid"}})
		a.set("orders-g2", fmt.Sprintf("k%d", k), 1, bson.D{{Key: "status", Value: "paid"}}) // the rebuild, caught up
	}
	s := a.watch("/v1/views/orders?watch=true")
	f := newFollower(t)
	var synced sseEvent
	for synced.event != "synced" {
		synced = s.next()
		f.take(synced)
	}
	filtered := a.watch("/v1/views/orders?watch=true&status=eq.paid")
	ff := newFollower(t)
	for e := filtered.next(); e.event != "synced"; e = filtered.next() {
		ff.take(e)
	}

	a.set("orders", "k1", 2, bson.D{{Key: "status", Value: "paid"}}) // before the switch, in both
	a.set("orders-g2", "k1", 2, bson.D{{Key: "status", Value: "paid"}})
	f.until(s, func(m map[string]int64) bool { return m["k1"] == 2 })
	a.set("orders-g2", "k2", 3, bson.D{{Key: "status", Value: "open"}}) // the new generation is ahead
	a.tombstone("orders-g2", "k3", 2)
	a.set("orders-g2", "k9", 1, bson.D{{Key: "status", Value: "paid"}})
	a.switchTo("orders-g2", 2)
	a.set("orders", "k4", 5, bson.D{{Key: "status", Value: "paid"}}) // an old projector, still writing
	a.set("orders-g2", "k4", 5, bson.D{{Key: "status", Value: "paid"}})

	want := map[string]int64{"k0": 1, "k1": 2, "k2": 3, "k4": 5, "k5": 1, "k9": 1}
	f.until(s, func(m map[string]int64) bool { return fmt.Sprint(m) == fmt.Sprint(want) })
	a.set("orders-g2", "k5", 6, bson.D{{Key: "status", Value: "paid"}})
	want["k5"] = 6
	f.until(s, func(m map[string]int64) bool { return m["k5"] == 6 })
	assert.Equal(t, want, f.state)

	wantPaid := map[string]int64{"k0": 1, "k1": 2, "k4": 5, "k5": 6, "k9": 1}
	ff.until(filtered, func(m map[string]int64) bool { return fmt.Sprint(m) == fmt.Sprint(wantPaid) })

	t.Run("resumed from a position of the old generation", func(t *testing.T) {
		r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", synced.id)
		g := newFollower(t)
		for k, v := range map[string]int64{"k0": 1, "k1": 1, "k2": 1, "k3": 1, "k4": 1, "k5": 1} {
			g.state[k], g.last[k] = v, v // what the snapshot gave
		}
		g.until(r, func(m map[string]int64) bool { return fmt.Sprint(m) == fmt.Sprint(want) })
	})

	t.Run("resumed within the switch", func(t *testing.T) {
		// The first message of the switch a fresh client of the old generation gets.
		r := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", synced.id)
		var first sseEvent
		for {
			e := r.next()
			p := e.payload(t)
			if p.Key == "k2" { // the first key the switch sends
				first = e
				break
			}
		}
		r.close()
		g := newFollower(t)
		for k, v := range map[string]int64{"k0": 1, "k1": 2, "k2": 3, "k3": 1, "k4": 5, "k5": 1} {
			g.state[k], g.last[k] = v, v // what it held by then
		}
		r2 := a.watch("/v1/views/orders?watch=true", "Last-Event-ID", first.id)
		g.until(r2, func(m map[string]int64) bool { return fmt.Sprint(m) == fmt.Sprint(want) })
	})
}

// TestWatchSwitchExpires: a new generation that never catches up with the one a watch read
// (a key it holds at a version the new one never reaches: a changed projection) ends the
// watch after Config.SwitchTimeout with position_expired: the client starts again.
func TestWatchSwitchExpires(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.SwitchTimeout = time.Second }))
	a.set("orders", "k", 7, nil)
	a.set("orders-g2", "k", 1, nil)
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "upsert", s.next().event)
	require.Equal(t, "synced", s.next().event)
	a.switchTo("orders-g2", 2)
	e := s.next()
	require.Equal(t, "disconnect", e.event)
	assert.Contains(t, e.data, `"code":"position_expired"`)
	assert.True(t, s.ended(5*time.Second))
	assert.Equal(t, 1.0, metricSum(t, a, "snapshotapi_watch_ends_total"))
}

// TestWatchSwitchReadsVersionsInBatches: a new generation that ran ahead of the old one (the
// old one's projectors stopped at the switch while events kept coming) differs from it on
// many keys, some deleted in one generation and live in the other; the switch reads their
// versions many keys at a time, not one round trip a key, and sends each difference.
func TestWatchSwitchReadsVersionsInBatches(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.KeepAlive = 100 * time.Millisecond }))
	const keys = 300
	for k := range keys {
		key := fmt.Sprintf("k%03d", k)
		a.set("orders", key, 1, bson.D{{Key: "status", Value: "paid"}})
		switch k % 3 {
		case 0: // deleted in the new generation
			a.tombstone("orders-g2", key, 2)
		case 1: // ahead in the new generation
			a.set("orders-g2", key, 2, bson.D{{Key: "status", Value: "paid"}})
		case 2: // deleted in the old generation, back in the new one
			a.tombstone("orders", key, 2)
			a.set("orders-g2", key, 3, bson.D{{Key: "status", Value: "paid"}})
		}
	}
	s := a.watch("/v1/views/orders?watch=true")
	f := newFollower(t)
	for e := s.next(); e.event != "synced"; e = s.next() {
		f.take(e)
	}
	require.Len(t, f.state, keys*2/3)
	before := a.findCount()
	a.switchTo("orders-g2", 2)
	for {
		e := s.block(10 * time.Second)
		f.take(e)
		if slices.Contains(e.comments, "generation switched") {
			break
		}
	}
	finds := a.findCount() - before
	want := map[string]int64{}
	for k := range keys {
		if k%3 != 0 {
			want[fmt.Sprintf("k%03d", k)] = int64(1 + k%3)
		}
	}
	assert.Equal(t, want, f.state)
	assert.Less(t, finds, 20, "finds during the switch: %d keys differ in whether they match", keys*2/3)
	t.Logf("%d finds during the switch", finds)
}

// TestWatchSwitchRetriedSendsNothingTwice: when the switch cannot open the new generation's
// change stream (MongoDB unreachable for a moment), it is tried again later; what the failed
// try had read is not sent, so nothing is sent twice and the versions of a key only increase.
func TestWatchSwitchRetriedSendsNothingTwice(t *testing.T) {
	// Without retried reads, a failure reaches the watch.
	client, err := mongo.Connect(options.Client().ApplyURI(embeddedtest.MongoURI(t)).SetAppName(apiAppName).SetRetryReads(false))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.KeepAlive = 100 * time.Millisecond }),
		func(_ *snapshotapi.Config, d *snapshotapi.Deps) { d.Mongo = client })
	for k := range 20 {
		key := fmt.Sprintf("k%02d", k)
		a.set("orders", key, 1, bson.D{{Key: "status", Value: "paid"}})
		a.set("orders-g2", key, int64(1+k%2), bson.D{{Key: "status", Value: "paid"}}) // half of them ahead
	}
	s := a.watch("/v1/views/orders?watch=true")
	f := newFollower(t)
	for e := s.next(); e.event != "synced"; e = s.next() {
		f.take(e)
	}
	// The new generation's change stream fails to open, once.
	embeddedtest.InjectMongoFault(t, a.db.Client(), embeddedtest.MongoFault{Commands: []string{"aggregate"}, Times: 1,
		CloseConnection: true, AppName: apiAppName})
	a.switchTo("orders-g2", 2)
	want := map[string]int64{}
	for k := range 20 {
		want[fmt.Sprintf("k%02d", k)] = int64(1 + k%2)
	}
	switched := false
	for !switched || fmt.Sprint(f.state) != fmt.Sprint(want) {
		e := s.block(10 * time.Second)
		f.take(e) // fails on a version sent twice
		switched = switched || slices.Contains(e.comments, "generation switched")
	}
	a.set("orders-g2", "k99", 1, bson.D{{Key: "status", Value: "paid"}}) // after every key
	f.until(s, func(m map[string]int64) bool { return m["k99"] == 1 })   // the new generation's changes come
	assert.Equal(t, int64(1), embeddedtest.MongoFailPointActivations(t, a.db.Client(), "failCommand"), "the stream's opening failed")
}
