package changefeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// startDrainer runs a drainer of e.db's collection "outbox" until the test ends.
func (e *env) startDrainer(cfg changefeed.OutboxConfig) *changefeed.Drainer {
	e.t.Helper()
	cfg.Database, cfg.Collection = e.db.Name(), "outbox"
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Second
	}
	d, err := changefeed.NewDrainer(e.t.Context(), e.bus, e.db.Client(), cfg,
		changefeed.WithLogger(embeddedtest.Logger(e.t)), changefeed.WithDeadLetters(e.dlq))
	require.NoError(e.t, err)
	e.runComponent(d)
	return d
}

func (e *env) outboxLen() int64 {
	e.t.Helper()
	n, err := e.db.Collection("outbox").CountDocuments(e.t.Context(), bson.D{{Key: "sent", Value: bson.D{{Key: "$exists", Value: false}}}})
	require.NoError(e.t, err)
	return n
}

// inTxn runs fn in a MongoDB transaction; fn's error aborts it.
func inTxn(t *testing.T, client *mongo.Client, fn func(ctx context.Context) error) error {
	t.Helper()
	sess, err := client.StartSession()
	require.NoError(t, err)
	defer sess.EndSession(context.Background())
	_, err = sess.WithTransaction(t.Context(), func(ctx context.Context) (any, error) { return nil, fn(ctx) })
	return err
}

func TestAppendOutboxRefuses(t *testing.T) {
	coll := embeddedtest.Mongo(t).Collection("outbox")
	ctx := t.Context()
	cases := []struct {
		name    string
		topic   string
		payload any
		opts    []jetbus.PublishOption
		want    error
	}{
		{"bad topic", "Orders", 1, nil, jetbus.ErrInvalidTopic},
		{"reserved topic", "dlq.orders", 1, nil, jetbus.ErrInvalidTopic},
		{"key with a control character", "orders", 1, []jetbus.PublishOption{jetbus.WithKey("a\nb")}, jetbus.ErrInvalidKey},
		{"reserved header", "orders", 1, []jetbus.PublishOption{jetbus.WithHeaders(map[string]string{"x-dlq-reason": "x"})}, jetbus.ErrReservedHeader},
		{"header value with a newline", "orders", 1, []jetbus.PublishOption{jetbus.WithHeaders(map[string]string{"x-a": "1\r\n2"})}, jetbus.ErrInvalidHeader},
		{"raw payload that is not JSON", "orders", json.RawMessage("{"), nil, jetbus.ErrInvalidPayload},
		{"payload that does not marshal", "orders", make(chan int), nil, jetbus.ErrInvalidPayload},
		{"empty ID", "orders", 1, []jetbus.PublishOption{jetbus.WithID("")}, jetbus.ErrInvalidOption},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := changefeed.AppendOutbox(ctx, coll, tc.topic, tc.payload, tc.opts...)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, n, "nothing written")
}

// TestOutbox: events appended in a committed transaction are published once each, with
// their ID, key, headers, tags and time, in order per key, and removed from the outbox; an
// aborted transaction publishes nothing. Documents pending before the drainer starts are
// published first.
func TestOutbox(t *testing.T) {
	for _, after := range []string{changefeed.OutboxDelete, changefeed.OutboxMark} {
		t.Run(after, func(t *testing.T) {
			e := newEnv(t, "ob.orders")
			ctx := t.Context()
			client, outbox, orders := e.db.Client(), e.db.Collection("outbox"), e.db.Collection("orders")
			// Pending before any drainer runs.
			early, err := changefeed.AppendOutbox(ctx, outbox, "ob.orders", map[string]any{"n": -1}, jetbus.WithKey("k0"))
			require.NoError(t, err)
			d := e.startDrainer(changefeed.OutboxConfig{Name: "ob", After: after})
			waitRole(t, d, changefeed.RoleActive)

			var want []*jetbus.Event
			err = inTxn(t, client, func(ctx context.Context) error {
				if _, err := orders.InsertOne(ctx, bson.D{{Key: "_id", Value: "o1"}}); err != nil {
					return err
				}
				for i := range 2 {
					ev, err := changefeed.AppendOutbox(ctx, outbox, "ob.orders", map[string]any{"n": i}, jetbus.WithKey("k1"),
						jetbus.WithHeaders(map[string]string{"x-tenant": "acme"}), jetbus.WithTags("t1"))
					if err != nil {
						return err
					}
					want = append(want, ev)
				}
				return nil
			})
			require.NoError(t, err)
			aborted := errors.New("business rule failed")
			err = inTxn(t, client, func(ctx context.Context) error {
				if _, err := changefeed.AppendOutbox(ctx, outbox, "ob.orders", map[string]any{"n": 99}, jetbus.WithKey("k9")); err != nil {
					return err
				}
				return aborted
			})
			require.ErrorIs(t, err, aborted)

			evs := e.waitEvents("ob.orders", 3)
			require.Never(t, func() bool { return e.countNow("ob.orders") > 3 }, time.Second, 50*time.Millisecond, "the aborted transaction publishes nothing")
			assert.Equal(t, []string{early.ID, want[0].ID, want[1].ID}, []string{evs[0].ID, evs[1].ID, evs[2].ID}, "Msg-Id = _id, in order")
			assert.JSONEq(t, `{"n":1}`, string(evs[2].Payload))
			assert.Equal(t, "k1", evs[2].Key)
			st, err := e.bus.JetStream().Stream(ctx, jetbus.StreamName("ob.orders"))
			require.NoError(t, err)
			msg, err := st.GetMsg(ctx, evs[2].Seq)
			require.NoError(t, err)
			assert.Equal(t, "acme", msg.Header.Get("x-tenant"))
			assert.Equal(t, "t1", msg.Header.Get(jetbus.HeaderTags))
			assert.Equal(t, fmt.Sprint(want[1].TS.UnixMilli()), msg.Header.Get(jetbus.HeaderTS))

			require.Eventually(t, func() bool { return e.outboxLen() == 0 }, 10*time.Second, 10*time.Millisecond, "published documents leave the outbox")
			total, err := outbox.CountDocuments(ctx, bson.D{})
			require.NoError(t, err)
			if after == changefeed.OutboxMark {
				assert.EqualValues(t, 3, total, "kept, marked sent")
				idx, err := outbox.Indexes().ListSpecifications(ctx)
				require.NoError(t, err)
				ttl := false
				for _, s := range idx {
					ttl = ttl || (s.ExpireAfterSeconds != nil && *s.ExpireAfterSeconds == int32(24*3600))
				}
				assert.True(t, ttl, "a TTL index expires sent documents")
			} else {
				assert.Zero(t, total, "deleted")
			}
		})
	}
}

// TestOutboxBadDocuments: documents an application wrote without AppendOutbox are hostile
// input: those that cannot be published are dead-lettered with the reason and removed; the
// others are published.
func TestOutboxBadDocuments(t *testing.T) {
	e := newEnv(t, "ob.orders")
	ctx := t.Context()
	outbox := e.db.Collection("outbox")
	e.startDrainer(changefeed.OutboxConfig{Name: "bad", Topics: []string{"ob.orders"}})
	oid := bson.NewObjectID()
	docs := []bson.D{
		{{Key: "_id", Value: "no-topic"}, {Key: "payload", Value: "{}"}},
		{{Key: "_id", Value: "not-json"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: "{oops"}},
		{{Key: "_id", Value: "bad-header"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: "1"}, {Key: "headers", Value: bson.D{{Key: "x-n", Value: 5}}}},
		{{Key: "_id", Value: "reserved"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: "1"}, {Key: "headers", Value: bson.D{{Key: "x-dlq-reason", Value: "fake"}}}},
		{{Key: "_id", Value: "bad-topic"}, {Key: "topic", Value: "in.orders"}, {Key: "payload", Value: "1"}},
		{{Key: "_id", Value: "bad-key"}, {Key: "topic", Value: "ob.orders"}, {Key: "key", Value: "a\x00b"}, {Key: "payload", Value: "1"}},
		{{Key: "_id", Value: "no-payload"}, {Key: "topic", Value: "ob.orders"}},
		{{Key: "_id", Value: "other-topic"}, {Key: "topic", Value: "ob.refunds"}, {Key: "payload", Value: "1"}},
		{{Key: "_id", Value: "replay:OB_ORDERS:1:billing"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: "1"}},
		{{Key: "_id", Value: oid}, {Key: "topic", Value: "ob.orders"}, {Key: "key", Value: "k"}, {Key: "payload", Value: bson.D{{Key: "a", Value: 1}}}},
		{{Key: "_id", Value: "good"}, {Key: "topic", Value: "ob.orders"}, {Key: "payload", Value: `{"ok":true}`}},
	}
	for _, d := range docs {
		_, err := outbox.InsertOne(ctx, d)
		require.NoError(t, err)
	}
	evs := e.waitEvents("ob.orders", 2)
	require.ElementsMatch(t, []string{oid.Hex(), "good"}, []string{evs[0].ID, evs[1].ID}, "an ObjectId _id is the event ID in hex")
	for _, ev := range evs {
		if ev.ID == oid.Hex() {
			assert.JSONEq(t, `{"a":1}`, string(ev.Payload), "a BSON payload is published as JSON")
		}
	}
	ls := letters(t, e.dlq, "outbox-bad", 9)
	errs := map[string]string{}
	for _, l := range ls {
		errs[l.OriginalID] = l.Error
		assert.Equal(t, dlq.ReasonChangefeed, l.Reason)
	}
	assert.Contains(t, errs["no-topic"], "topic is missing")
	assert.Contains(t, errs["not-json"], "not JSON")
	assert.Contains(t, errs["bad-header"], "not a string")
	assert.Contains(t, errs["reserved"], "reserved")
	for _, l := range ls {
		if l.OriginalID == "reserved" {
			assert.Equal(t, dlq.ReasonChangefeed, l.Header.Get(dlq.HeaderReason), "the document's x-dlq-reason does not reach the dead letter")
		}
	}
	assert.Contains(t, errs["bad-topic"], `topic "in.orders" is not one this outbox publishes to`)
	assert.Contains(t, errs["bad-key"], "control character")
	assert.Contains(t, errs["no-payload"], "payload is missing")
	assert.Contains(t, errs["other-topic"], `topic "ob.refunds" is not one this outbox publishes to`)
	assert.Contains(t, errs["replay:OB_ORDERS:1:billing"], "jetbus derives its own IDs from", "no outbox document passes for a DLQ replay")
	require.Eventually(t, func() bool { return e.outboxLen() == 0 }, 10*time.Second, 10*time.Millisecond, "every document settled")
}

// TestOutboxCrash: the drainer's process dies between publishing events and deleting their
// documents (the deletes are held by a fault on the server); the next process publishes them
// again, JetStream drops the copies, and each committed event is in the topic exactly once.
func TestOutboxCrash(t *testing.T) {
	e := newEnv(t, "obcrash.orders")
	ctx := t.Context()
	outbox := e.db.Collection("outbox")
	uri := embeddedtest.MongoURI(t)
	spec := childSpec{NATS: e.nats.ClientURL(), Mongo: uri, AppName: "outbox-drainer", Outbox: &changefeed.OutboxConfig{
		Name: "obcrash", Database: e.db.Name(), Collection: "outbox", LeaseTTL: time.Second,
	}}
	embeddedtest.InjectMongoFault(t, e.db.Client(), embeddedtest.MongoFault{Commands: []string{"delete"}, Block: time.Hour, AppName: "outbox-drainer"})
	c := startChild(t, spec)
	const n = 50
	for i := range n {
		err := inTxn(t, e.db.Client(), func(ctx context.Context) error {
			_, err := changefeed.AppendOutbox(ctx, outbox, "obcrash.orders", map[string]any{"i": i}, jetbus.WithKey(fmt.Sprint(i%5)))
			return err
		})
		require.NoError(t, err)
	}
	e.waitEvents("obcrash.orders", n)
	assert.EqualValues(t, n, e.outboxLen(), "published, not deleted: the deletes are held")
	c.Kill()
	require.NoError(t, e.db.Client().Database("admin").RunCommand(ctx,
		bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err())

	c = startChild(t, spec)
	require.Eventually(t, func() bool { return e.outboxLen() == 0 }, 30*time.Second, 20*time.Millisecond, "the next drainer settles them")
	require.Never(t, func() bool { return e.countNow("obcrash.orders") > n }, time.Second, 50*time.Millisecond)
	evs := e.events("obcrash.orders")
	require.Len(t, evs, n, "exactly once")
	for key, kevs := range byKey(evs) {
		prev := -1
		for _, ev := range kevs {
			i := int(ev.decoded(t)["i"].(float64))
			assert.Greater(t, i, prev, "order of key %s", key)
			prev = i
		}
	}
	assert.Positive(t, restartsWithDuplicates([]*child{c}), "the second drainer re-published and JetStream dropped the copies")
	c.stop()
}

// TestOutboxDocumentTooLargeForTheDLQ: a document larger than the server's max payload can be
// neither published nor dead-lettered whole: it is dead-lettered as a record (size, SHA-256,
// key) and the drainer moves on to the next one.
func TestOutboxDocumentTooLargeForTheDLQ(t *testing.T) {
	e := newEnv(t, "ob.orders")
	ctx := t.Context()
	outbox := e.db.Collection("outbox")
	e.startDrainer(changefeed.OutboxConfig{Name: "huge"})
	big := `"` + strings.Repeat("x", 3<<20) + `"` // 3 MiB: over NATS's 1 MiB max payload
	for _, d := range []bson.D{
		{{Key: "_id", Value: "huge"}, {Key: "topic", Value: "ob.orders"}, {Key: "key", Value: "k"}, {Key: "payload", Value: big}},
		{{Key: "_id", Value: "after"}, {Key: "topic", Value: "ob.orders"}, {Key: "key", Value: "k"}, {Key: "payload", Value: `{"ok":true}`}},
	} {
		_, err := outbox.InsertOne(ctx, d)
		require.NoError(t, err)
	}
	evs := e.waitEvents("ob.orders", 1)
	assert.Equal(t, "after", evs[0].ID, "the drainer moved on")
	ls := letters(t, e.dlq, "outbox-huge", 1)
	assert.Contains(t, ls[0].Error, "kept as a record")
	assert.Contains(t, string(ls[0].Body), `"truncated":true`)
	assert.Contains(t, string(ls[0].Body), `"size":3145730`)
	require.Eventually(t, func() bool { return e.outboxLen() == 0 }, 10*time.Second, 10*time.Millisecond, "both settled")
}
