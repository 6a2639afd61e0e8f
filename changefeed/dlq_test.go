package changefeed_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// letters waits until the DLQ holds n letters of group and returns them.
func letters(t *testing.T, q *dlq.Queue, group string, n int) []*dlq.Letter {
	t.Helper()
	var ls []*dlq.Letter
	require.Eventually(t, func() bool {
		var err error
		ls, err = q.List(t.Context(), dlq.Filter{Group: group}, 0)
		return err == nil && len(ls) >= n
	}, 30*time.Second, 20*time.Millisecond, "%d dead letters of %s", n, group)
	return ls
}

// TestDeadLetters: a change too large to publish, one its topic's schema refuses, and one
// whose templated topic is not a valid name or does not exist go to the DLQ with their key and
// reason; the feed goes on with the next change.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t, "dl.orders", "dl.customers")
	ctx := t.Context()
	reg, err := schema.Open(ctx, e.bus.JetStream())
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	_, err = reg.Register(ctx, "dl.orders", []byte(`{"type":"object","required":["total"],"properties":{"total":{"type":"number"}}}`))
	require.NoError(t, err)
	validated := embeddedtest.Bus(t, e.nats.ClientURL(), jetstream.WithPublishMiddleware(reg.PublishMiddleware()))
	f, err := changefeed.New(ctx, validated, e.db.Client(), changefeed.Config{
		Name: "dl", Database: e.db.Name(), Topic: "dl.{collection}", LeaseTTL: time.Second,
	}, changefeed.WithDeadLetters(e.dlq), changefeed.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	e.runComponent(f)
	waitRole(t, f, changefeed.RoleActive)
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "dl") != nil }, 10*time.Second, 10*time.Millisecond)

	orders, customers := e.db.Collection("orders"), e.db.Collection("customers")
	_, err = orders.InsertOne(ctx, bson.D{{Key: "_id", Value: "bad"}, {Key: "total", Value: "nine"}})
	require.NoError(t, err)
	big := strings.Repeat("x", 2<<20) // over the server's 1 MiB max payload
	_, err = customers.InsertOne(ctx, bson.D{{Key: "_id", Value: "huge"}, {Key: "blob", Value: big}})
	require.NoError(t, err)
	_, err = e.db.Collection("Misc").InsertOne(ctx, bson.D{{Key: "_id", Value: "caps"}})
	require.NoError(t, err)
	_, err = e.db.Collection("unknown").InsertOne(ctx, bson.D{{Key: "_id", Value: "nowhere"}})
	require.NoError(t, err)
	_, err = orders.InsertOne(ctx, bson.D{{Key: "_id", Value: "good"}, {Key: "total", Value: 9.5}})
	require.NoError(t, err)
	_, err = customers.InsertOne(ctx, bson.D{{Key: "_id", Value: "c1"}})
	require.NoError(t, err)

	assert.Equal(t, []string{"good"}, keysOf(e.waitEvents("dl.orders", 1)), "the feed goes on")
	assert.Equal(t, []string{"c1"}, keysOf(e.waitEvents("dl.customers", 1)))
	byKey := map[string]*dlq.Letter{}
	for _, l := range letters(t, e.dlq, "changefeed-dl", 4) {
		assert.Equal(t, dlq.ReasonChangefeed, l.Reason)
		assert.Equal(t, "changefeed.dl", l.OriginalSubject)
		assert.True(t, l.Rejected())
		byKey[l.Key] = l
	}
	require.Len(t, byKey, 4)
	assert.Contains(t, byKey["bad"].Error, "does not validate")
	assert.JSONEq(t, `{"_id":"bad","total":"nine"}`, string(byKey["bad"].Body), "the change itself, for a replay after the schema is fixed")
	assert.Equal(t, "dl.orders", byKey["bad"].Topic)

	assert.Contains(t, byKey["huge"].Error, "max payload")
	var sum map[string]any
	require.NoError(t, json.Unmarshal(byKey["huge"].Body, &sum))
	assert.Equal(t, "huge", sum["key"], "too large: a summary with the key")
	assert.Equal(t, e.db.Name()+".customers", sum["ns"])
	assert.Greater(t, sum["size"], float64(2<<20))

	assert.Contains(t, byKey["caps"].Error, "invalid topic")
	assert.Equal(t, "_unrouted", byKey["caps"].Topic, "no valid topic: filed as unrouted")
	assert.Contains(t, byKey["nowhere"].Error, "topic not found")
	assert.Equal(t, "dl.unknown", byKey["nowhere"].Topic)

	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 4, st.(changefeed.Status).DeadLettered)
}

// TestNoDeadLetterQueue: without a DLQ, a change that cannot be published stops the feed
// there — reported, never skipped — and nothing after it is published.
func TestNoDeadLetterQueue(t *testing.T) {
	e := newEnv(t, "nodlq.items")
	ctx := t.Context()
	f, err := changefeed.New(ctx, e.bus, e.db.Client(), changefeed.Config{
		Name: "nodlq", Database: e.db.Name(), Collection: "items", Topic: "nodlq.items", LeaseTTL: time.Second,
	}, changefeed.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	e.runComponent(f)
	require.Eventually(t, func() bool { return savedPosition(t, e.bus.JetStream(), "nodlq") != nil }, 10*time.Second, 10*time.Millisecond)
	items := e.db.Collection("items")
	insertKeys(t, items, "first")
	_, err = items.InsertOne(ctx, bson.D{{Key: "_id", Value: "huge"}, {Key: "blob", Value: strings.Repeat("x", 2<<20)}})
	require.NoError(t, err)
	insertKeys(t, items, "after")
	e.waitEvents("nodlq.items", 1)
	require.Eventually(t, func() bool {
		st, _ := f.Status(ctx)
		return strings.Contains(st.(changefeed.Status).Error, "no DLQ")
	}, 10*time.Second, 10*time.Millisecond, "the error is reported")
	require.Never(t, func() bool { return e.countNow("nodlq.items") > 1 }, time.Second, 50*time.Millisecond, "nothing after it is published")
}
