package changefeed_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// boundedMongo starts the test backend with an oplog of n events. A real deployment's oplog
// cannot be rolled over on demand by a test, so these tests need the backend.
func boundedMongo(t *testing.T, n int) *mongo.Database {
	t.Helper()
	if os.Getenv(embeddedtest.MongoURIEnv) != "" {
		t.Skip("needs the test backend's bounded oplog (Options.OplogSize) to lose history on demand")
	}
	s, err := minimongo.Start(minimongo.Options{OplogSize: n})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("shop")
}

// noise makes n changes in another collection, pushing older changes out of the oplog.
func noise(t *testing.T, db *mongo.Database, n int) {
	t.Helper()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "x", Value: i}}
	}
	_, err := db.Collection("noise").InsertMany(t.Context(), docs, options.InsertMany().SetOrdered(true))
	require.NoError(t, err)
}

func insertKeys(t *testing.T, coll *mongo.Collection, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_, err := coll.InsertOne(t.Context(), bson.D{{Key: "_id", Value: k}})
		require.NoError(t, err)
	}
}

func keysOf(evs []event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Key)
	}
	return out
}

// TestHistoryLost: a feed whose saved position rolled out of the oplog while it was stopped
// does what its policy says: fail (nothing published, Ready and the metrics say so, until the
// position is reset), latest (continue with new changes, the lost ones are not published), or
// recopy (copy the collection again, then stream).
func TestHistoryLost(t *testing.T) {
	for _, policy := range []changefeed.HistoryPolicy{changefeed.HistoryFail, changefeed.HistoryLatest, changefeed.HistoryRecopy} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnvOn(t, boundedMongo(t, 50), "lost.items")
			items := e.db.Collection("items")
			cfg := changefeed.Config{Name: "lost", Collection: "items", Topic: "lost.items", OnHistoryLost: policy}
			f := e.start(cfg)
			require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "lost") != nil }, 10*time.Second, 10*time.Millisecond)
			insertKeys(t, items, "a", "b")
			e.waitEvents("lost.items", 2)
			stopFeed(t, f)

			insertKeys(t, items, "during") // made while no feed runs, then lost from the oplog
			noise(t, e.db, 100)

			reg := prometheus.NewRegistry()
			f = e.start(cfg, changefeed.WithRegisterer(reg))
			switch policy {
			case changefeed.HistoryFail:
				require.Eventually(t, func() bool { return f.Ready(t.Context()) != nil }, 10*time.Second, 10*time.Millisecond, "readyz false")
				err := f.Ready(t.Context())
				assert.ErrorIs(t, err, changefeed.ErrHistoryLost)
				assert.Contains(t, err.Error(), "delete key \"lost\" of KV bucket jetbus_changefeeds", "says what to do")
				assert.Equal(t, 1.0, metricValue(t, reg, "changefeed_history_lost_total"))
				assert.Equal(t, 1.0, metricValue(t, reg, "changefeed_failed"))
				st, _ := f.Status(t.Context())
				assert.Equal(t, changefeed.RoleFailed, st.(changefeed.Status).Role)
				insertKeys(t, items, "after")
				require.Never(t, func() bool { return e.countNow("lost.items") > 2 }, time.Second, 50*time.Millisecond, "nothing published while failed")

				require.NoError(t, changefeed.ResetPosition(t.Context(), e.bus.JetStream(), "lost"))
				require.Eventually(t, func() bool { return f.Ready(t.Context()) == nil && savedPosition(t, e.bus.JetStream(), "lost") != nil },
					10*time.Second, 10*time.Millisecond, "a reset starts the feed again by its start mode (latest)")
				assert.Equal(t, 0.0, metricValue(t, reg, "changefeed_failed"))
				insertKeys(t, items, "after-reset")
				assert.Equal(t, []string{"a", "b", "after-reset"}, keysOf(e.waitEvents("lost.items", 3)))
			case changefeed.HistoryLatest:
				require.Eventually(t, func() bool {
					p := savedPosition(t, e.bus.JetStream(), "lost")
					return p != nil && !p.HistoryLost.IsZero()
				}, 10*time.Second, 10*time.Millisecond, "the position records the loss")
				insertKeys(t, items, "after")
				assert.Equal(t, []string{"a", "b", "after"}, keysOf(e.waitEvents("lost.items", 3)), "the lost change is not published")
				assert.Equal(t, 1.0, metricValue(t, reg, "changefeed_history_lost_total"))
				assert.NoError(t, f.Ready(t.Context()))
			case changefeed.HistoryRecopy:
				evs := e.waitEvents("lost.items", 5)
				assert.Equal(t, []string{"a", "b", "a", "b", "during"}, keysOf(evs), "the collection copied again")
				for _, ev := range evs[2:] {
					assert.Equal(t, "read", ev.Op)
				}
				insertKeys(t, items, "after")
				assert.Equal(t, "after", e.waitEvents("lost.items", 6)[5].Key)
				assert.Equal(t, 1.0, metricValue(t, reg, "changefeed_history_lost_total"))
			}
		})
	}
}

// stopFeed stops a feed started by env.start and waits for it (its position saved).
func stopFeed(t *testing.T, f *changefeed.Feed) {
	t.Helper()
	// env.start registered the stop with t.Cleanup; the stop functions are idempotent.
	stopper, ok := stoppers.Load(f)
	require.True(t, ok)
	stopper.(func())()
}

// TestHeartbeat: a feed of a quiet collection keeps saving the position MongoDB reports for
// it while other collections change, so that its saved position stays in the oplog through
// rollovers; without heartbeats it would be lost.
func TestHeartbeat(t *testing.T) {
	db := boundedMongo(t, 50)
	e := newEnvOn(t, db, "quiet.items")
	e.start(changefeed.Config{Name: "quiet", Collection: "items", Topic: "quiet.items", Heartbeat: 50 * time.Millisecond})
	var first *changefeed.Position
	require.Eventually(t, func() bool { first = savedPosition(t, e.bus.JetStream(), "quiet"); return first != nil }, 10*time.Second, 10*time.Millisecond)
	// created first: creating it implicitly would add a create entry to the oplog, as in
	// MongoDB, and a 51st entry in one noise call would roll the feed's position out
	require.NoError(t, db.CreateCollection(t.Context(), "noise"))
	// The feed's stream reads past the create entry before the first noise: otherwise 50
	// entries after it roll out an oplog position the stream has not reached yet, and the
	// stream (in MongoDB as here) loses its history.
	require.Eventually(t, func() bool {
		return string(savedPosition(t, e.bus.JetStream(), "quiet").Token) != string(first.Token)
	}, 10*time.Second, 10*time.Millisecond, "the quiet feed's position passes the noise collection's creation")
	for range 6 { // 300 changes elsewhere: the oplog (50) rolls over six times
		before := savedPosition(t, e.bus.JetStream(), "quiet")
		noise(t, db, 50)
		require.Eventually(t, func() bool {
			p := savedPosition(t, e.bus.JetStream(), "quiet")
			return p.Saved.After(before.Saved) && string(p.Token) != string(before.Token)
		}, 10*time.Second, 10*time.Millisecond, "the quiet feed's position advances")
	}
	resumable := func(p *changefeed.Position) error {
		var tok bson.Raw
		require.NoError(t, bson.UnmarshalExtJSON(p.Token, true, &tok))
		cs, err := db.Collection("items").Watch(t.Context(), mongo.Pipeline{}, options.ChangeStream().SetStartAfter(tok))
		if err == nil {
			_ = cs.Close(t.Context())
		}
		return err
	}
	assert.NoError(t, resumable(savedPosition(t, e.bus.JetStream(), "quiet")), "the saved position is still in the oplog")
	err := resumable(first)
	var se mongo.ServerError
	require.ErrorAs(t, err, &se, "the position before the rollovers is gone")
	assert.True(t, se.HasErrorCode(286), "ChangeStreamHistoryLost: %v", err)
	insertKeys(t, db.Collection("items"), "x")
	assert.Equal(t, []string{"x"}, keysOf(e.waitEvents("quiet.items", 1)))
}
