package changefeed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/jetstream"
)

// TestScopes: a feed of a database publishes each collection to its own topic by the
// template; a feed of the deployment does the same across databases.
func TestScopes(t *testing.T) {
	t.Run("database", func(t *testing.T) {
		e := newEnv(t, "scope.a", "scope.b")
		e.start(changefeed.Config{Name: "db", Database: e.db.Name(), Topic: "scope.{collection}"})
		require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "db") != nil }, 10*time.Second, 10*time.Millisecond)
		insertKeys(t, e.db.Collection("a"), "a1")
		insertKeys(t, e.db.Collection("b"), "b1")
		insertKeys(t, e.db.Collection("a"), "a2")
		assert.Equal(t, []string{"a1", "a2"}, keysOf(e.waitEvents("scope.a", 2)))
		assert.Equal(t, []string{"b1"}, keysOf(e.waitEvents("scope.b", 1)))
	})
	t.Run("deployment", func(t *testing.T) {
		e := newEnv(t, "deploy.x", "other.y")
		e.start(changefeed.Config{Name: "all", Topic: "{database}.{collection}"})
		require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "all") != nil }, 10*time.Second, 10*time.Millisecond)
		client := e.db.Client()
		insertKeys(t, client.Database("deploy").Collection("x"), "x1")
		insertKeys(t, client.Database("other").Collection("y"), "y1")
		assert.Equal(t, []string{"x1"}, keysOf(e.waitEvents("deploy.x", 1)))
		assert.Equal(t, []string{"y1"}, keysOf(e.waitEvents("other.y", 1)))
	})
}

// TestInvalidate: dropping the watched collection invalidates MongoDB's stream; the feed
// continues after the invalidate event and publishes the changes of the collection created
// again under the name.
func TestInvalidate(t *testing.T) {
	e := newEnv(t, "inval.items")
	items := e.db.Collection("items")
	e.start(changefeed.Config{Name: "inval", Collection: "items", Topic: "inval.items"})
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "inval") != nil }, 10*time.Second, 10*time.Millisecond)
	insertKeys(t, items, "before")
	e.waitEvents("inval.items", 1)
	require.NoError(t, items.Drop(t.Context()))
	insertKeys(t, items, "after")
	assert.Equal(t, []string{"before", "after"}, keysOf(e.waitEvents("inval.items", 2)))
}

// TestPostImages: with fullDocument whenAvailable and a collection that records images, an
// envelope carries the document as it was after each change and before it; a collection
// without images gets the document looked up.
func TestPostImages(t *testing.T) {
	e := newEnv(t, "img.items", "img.plain")
	ctx := t.Context()
	require.NoError(t, e.db.CreateCollection(ctx, "items",
		options.CreateCollection().SetChangeStreamPreAndPostImages(bson.D{{Key: "enabled", Value: true}})))
	e.start(changefeed.Config{Name: "img", Database: e.db.Name(), Topic: "img.{collection}",
		Format: changefeed.FormatEnvelope, FullDocument: changefeed.FullDocumentWhenAvailable})
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "img") != nil }, 10*time.Second, 10*time.Millisecond)
	for _, coll := range []string{"items", "plain"} {
		c := e.db.Collection(coll)
		_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "v", Value: 0}})
		require.NoError(t, err)
		for v := 1; v <= 2; v++ {
			_, err = c.UpdateByID(ctx, "k", bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: v}}}})
			require.NoError(t, err)
		}
	}
	items := e.waitEvents("img.items", 3)
	for i, ev := range items[1:] {
		env := ev.decoded(t)
		assert.Equal(t, map[string]any{"_id": "k", "v": float64(i + 1)}, env["after"], "the post-image of update %d", i+1)
		assert.Equal(t, map[string]any{"_id": "k", "v": float64(i)}, env["before"], "the pre-image of update %d", i+1)
	}
	plain := e.waitEvents("img.plain", 3)
	for _, ev := range plain[1:] {
		env := ev.decoded(t)
		assert.Nil(t, env["before"], "no pre-image recorded")
		assert.NotNil(t, env["after"], "looked up")
	}
}

// TestPublishFailure: while the topic's stream is gone every publish fails; the feed keeps
// its acknowledged position, reports the error, and once the stream is back publishes every
// change exactly once, in order.
func TestPublishFailure(t *testing.T) {
	e := newEnv(t, "fail.items")
	ctx := t.Context()
	items := e.db.Collection("items")
	f := e.start(changefeed.Config{Name: "fail", Collection: "items", Topic: "fail.items"})
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "fail") != nil }, 10*time.Second, 10*time.Millisecond)
	insertKeys(t, items, "k0", "k1")
	e.waitEvents("fail.items", 2)
	require.NoError(t, e.bus.JetStream().DeleteStream(ctx, jetbus.StreamName("fail.items")))
	insertKeys(t, items, "k2", "k3", "k4")
	require.Eventually(t, func() bool {
		st, _ := f.Status(ctx)
		return st.(changefeed.Status).Error != ""
	}, 30*time.Second, 10*time.Millisecond, "the failure is reported")
	require.NoError(t, e.bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "fail.items", Partitions: 2}))
	insertKeys(t, items, "k5")
	evs := e.waitEvents("fail.items", 4)
	require.Never(t, func() bool { return e.countNow("fail.items") > 4 }, time.Second, 50*time.Millisecond)
	assert.Equal(t, []string{"k2", "k3", "k4", "k5"}, keysOf(evs), "nothing skipped, nothing doubled")
	require.Eventually(t, func() bool {
		st, _ := f.Status(ctx)
		return st.(changefeed.Status).Error == ""
	}, 30*time.Second, 10*time.Millisecond, "progress clears the error")
}
