package changefeed_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
)

// writer makes changes to keys 0..keys-1 of coll until stopped: an insert {_id: k, v: 0} for
// each key first, then updates setting v to 1, 2, … round robin. Each change is one event in
// an envelope feed, its v in after (insert) or updateDescription (update).
type writer struct {
	made  atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	errMu sync.Mutex
	err   error
}

func startWriter(t *testing.T, coll *mongo.Collection, keys int, every time.Duration) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ctx := context.Background()
		v := make([]int, keys)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(every):
			}
			k := i % keys
			var err error
			if i < keys {
				_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(k)}, {Key: "v", Value: int32(0)}})
			} else {
				v[k]++
				_, err = coll.UpdateByID(ctx, int32(k), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: int32(v[k])}}}})
			}
			if err != nil {
				w.errMu.Lock()
				w.err = err
				w.errMu.Unlock()
				return
			}
			w.made.Add(1)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// checkExactlyOnce asserts that topic holds exactly the writer's changes: as many events as
// changes, no ID twice, and per key the versions 0, 1, 2, … in order.
func checkExactlyOnce(t *testing.T, e *env, topic string, w *writer) {
	t.Helper()
	w.halt()
	require.NoError(t, w.err)
	made := int(w.made.Load())
	evs := e.waitEvents(topic, made)
	// Nothing more arrives: a late duplicate would show here.
	require.Never(t, func() bool { return e.countNow(topic) > made }, 2*time.Second, 100*time.Millisecond, "more events than changes")
	require.Len(t, evs, made, "one event per change")
	ids := map[string]bool{}
	for _, ev := range evs {
		require.False(t, ids[ev.ID], "event %s twice", ev.ID)
		ids[ev.ID] = true
	}
	for key, kevs := range byKey(evs) {
		for i, ev := range kevs {
			require.Equal(t, i, versionOf(t, ev), "key %s: event %d of %d", key, i, len(kevs))
		}
	}
}

// versionOf reads v from an envelope: after.v for an insert, updatedFields.v for an update.
func versionOf(t *testing.T, ev event) int {
	var env struct {
		After             map[string]any
		UpdateDescription struct{ UpdatedFields map[string]any }
	}
	require.NoError(t, json.Unmarshal(ev.Payload, &env))
	v, ok := env.UpdateDescription.UpdatedFields["v"]
	if !ok {
		v = env.After["v"]
	}
	f, ok := v.(float64)
	require.True(t, ok, "v in %s", ev.Payload)
	return int(f)
}

// TestCrashMidStream: the feed's process is killed with SIGKILL five times while writes
// continue; every change is in the topic exactly once, in order per key.
func TestCrashMidStream(t *testing.T) {
	kills := 5
	if testing.Short() {
		kills = 3
	}
	e := newEnv(t, "crash.items")
	uri := embeddedtest.MongoURI(t)
	spec := childSpec{NATS: e.nats.ClientURL(), Mongo: uri, AppName: "crash-feed", Feed: &changefeed.Config{
		Name: "crash", Database: e.db.Name(), Collection: "items", Topic: "crash.items",
		Format: changefeed.FormatEnvelope, LeaseTTL: time.Second, SaveInterval: 50 * time.Millisecond,
	}}
	c := startChild(t, spec)
	children := []*child{c}
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "crash") != nil }, 30*time.Second, 20*time.Millisecond, "first position saved")
	w := startWriter(t, e.db.Collection("items"), 20, 2*time.Millisecond)
	for i := range kills {
		before := e.count("crash.items")
		require.Eventually(t, func() bool { return e.countNow("crash.items") >= before+150 }, 60*time.Second, 5*time.Millisecond, "kill %d: feed publishes", i)
		c.Kill()
		t.Logf("kill %d after %d events, %d changes made", i+1, e.count("crash.items"), w.made.Load())
		c = startChild(t, spec)
		children = append(children, c)
	}
	checkExactlyOnce(t, e, "crash.items", w)
	c.stop()
	assert.Positive(t, restartsWithDuplicates(children), "some restart re-published changes the topic had (dropped as duplicates)")
}

// leaseOwner reads the member holding a feed's lease.
func leaseOwner(t *testing.T, e *env, feed string) string {
	g, err := partition.OpenGroup(t.Context(), e.bus.JetStream(), partition.Config{Topic: "changefeed", Group: "changefeed_" + feed, TTL: time.Second})
	require.NoError(t, err)
	info, err := g.ReadLease(t.Context(), 0)
	require.NoError(t, err)
	if info.State != partition.LeaseHeld {
		return ""
	}
	return info.Owner
}

// TestStandbyTakeover: two processes run the same feed; one is active, the other a hot
// standby. The active one is killed; the standby takes over from the saved token, and every
// change is in the topic exactly once.
func TestStandbyTakeover(t *testing.T) {
	e := newEnv(t, "standby.items")
	uri := embeddedtest.MongoURI(t)
	spec := func(member string) childSpec {
		return childSpec{NATS: e.nats.ClientURL(), Mongo: uri, AppName: "standby-" + member, Feed: &changefeed.Config{
			Name: "standby", Database: e.db.Name(), Collection: "items", Topic: "standby.items",
			Format: changefeed.FormatEnvelope, LeaseTTL: time.Second, MemberID: member,
		}}
	}
	children := map[string]*child{"a": startChild(t, spec("a")), "b": startChild(t, spec("b"))}
	var active string
	require.Eventually(t, func() bool {
		active = leaseOwner(t, e, "standby")
		return active != "" && savedPosition(t, e.bus.JetStream(), "standby") != nil
	}, 30*time.Second, 20*time.Millisecond)
	w := startWriter(t, e.db.Collection("items"), 10, 2*time.Millisecond)
	require.Eventually(t, func() bool { return e.countNow("standby.items") >= 200 }, 60*time.Second, 5*time.Millisecond)
	before := savedPosition(t, e.bus.JetStream(), "standby")
	children[active].Kill()
	standby := map[string]string{"a": "b", "b": "a"}[active]
	require.Eventually(t, func() bool { return leaseOwner(t, e, "standby") == standby }, 30*time.Second, 20*time.Millisecond, "the standby %s takes the lease", standby)
	require.Eventually(t, func() bool {
		p := savedPosition(t, e.bus.JetStream(), "standby")
		return p != nil && p.ClusterTime != nil && before.ClusterTime != nil && !p.Saved.Before(before.Saved) &&
			(p.ClusterTime.T > before.ClusterTime.T || p.ClusterTime.T == before.ClusterTime.T && p.ClusterTime.I > before.ClusterTime.I)
	}, 30*time.Second, 20*time.Millisecond, "the standby continues from the saved token")
	n := e.count("standby.items")
	require.Eventually(t, func() bool { return e.countNow("standby.items") >= n+200 }, 60*time.Second, 5*time.Millisecond, "the standby publishes")
	checkExactlyOnce(t, e, "standby.items", w)
	children[standby].stop()
	assert.Equal(t, "", leaseOwner(t, e, "standby"), "a stopped runner releases its lease")
}

// restartsWithDuplicates counts the children that logged re-publishes dropped as duplicates.
func restartsWithDuplicates(children []*child) int {
	n := 0
	for _, c := range children {
		if strings.Contains(c.Output().String(), "dropped as duplicates") {
			n++
		}
	}
	return n
}
