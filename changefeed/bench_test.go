package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// BenchmarkFeed compares a feed with the raw work it does, in the same run, on the same
// changes: each round inserts n documents, then "raw" reads their change events with the
// driver (fullDocument updateLookup, as the feed) and publishes each full document with
// nats.go's PublishMsgAsync (Nats-Msg-Id = the resume token), waiting for every ack; "feed"
// runs a changefeed.Feed from the position before the inserts until it has published (and
// acknowledged) the n changes, its position saved on the way (timed from when it holds its
// lease). Sides alternate, and which goes first. b.N is the number of changes per side.
//
// Raw renders the document as relaxed Extended JSON with the driver (extjson), or not at all:
// it publishes the BSON bytes (bson), the floor of what reading and publishing cost.
func BenchmarkFeed(b *testing.B) {
	for _, render := range []string{"extjson", "bson"} {
		b.Run(render, func(b *testing.B) { benchFeed(b, render == "extjson") })
	}
}

func benchFeed(b *testing.B, extJSON bool) {
	ctx := context.Background()
	s := embeddedtest.NATS(b)
	bus := embeddedtest.Bus(b, s.ClientURL())
	nc := embeddedtest.Connect(b, s.ClientURL())
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4000))
	require.NoError(b, err)
	for _, tp := range []string{"bench.raw", "bench.feed"} {
		require.NoError(b, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: tp, Partitions: 1}))
	}
	db := embeddedtest.Mongo(b)
	coll := db.Collection("orders")
	kv, err := bus.JetStream().CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: changefeed.PositionBucket, History: 5})
	require.NoError(b, err)

	const rounds = 10
	n := max(b.N/rounds, 1)
	var rawT, feedT time.Duration
	for r := range rounds {
		start := currentToken(b, coll)
		insertOrders(b, coll, r, n)
		raw := func() { rawT += rawRound(b, coll, js, start, n, extJSON) }
		feed := func() { feedT += feedRound(b, bus, kv, db, fmt.Sprintf("bench%d", r), start, n) }
		if r%2 == 0 {
			raw()
			feed()
		} else {
			feed()
			raw()
		}
	}
	ops := float64(n * rounds)
	b.ReportMetric(ops/rawT.Seconds(), "raw-changes/s")
	b.ReportMetric(ops/feedT.Seconds(), "feed-changes/s")
	b.ReportMetric(float64(rawT)/float64(feedT), "throughput-ratio")
	b.ReportMetric(0, "ns/op")
}

// currentToken returns a resume token for now.
func currentToken(b *testing.B, coll *mongo.Collection) bson.Raw {
	cs, err := coll.Watch(context.Background(), mongo.Pipeline{})
	require.NoError(b, err)
	defer cs.Close(context.Background())
	tok := cs.ResumeToken()
	require.NotNil(b, tok)
	return append(bson.Raw(nil), tok...)
}

// insertOrders inserts n order documents of about 200 bytes.
func insertOrders(b *testing.B, coll *mongo.Collection, round, n int) {
	docs := make([]any, 0, 1000)
	flush := func() {
		if len(docs) > 0 {
			_, err := coll.InsertMany(context.Background(), docs)
			require.NoError(b, err)
			docs = docs[:0]
		}
	}
	for i := range n {
		docs = append(docs, bson.D{
			{Key: "_id", Value: bson.NewObjectID()}, {Key: "round", Value: round}, {Key: "n", Value: i},
			{Key: "customer", Value: fmt.Sprintf("c-%d", i%997)}, {Key: "status", Value: "paid"},
			{Key: "total", Value: 42.5}, {Key: "created", Value: time.Now()},
			{Key: "items", Value: bson.A{bson.D{{Key: "sku", Value: "a-1"}, {Key: "qty", Value: 2}}, bson.D{{Key: "sku", Value: "b-7"}, {Key: "qty", Value: 1}}}},
		})
		if len(docs) == cap(docs) {
			flush()
		}
	}
	flush()
}

// rawRound reads n changes after start and publishes them with nats.go, as relaxed Extended
// JSON or as BSON.
func rawRound(b *testing.B, coll *mongo.Collection, js natsjs.JetStream, start bson.Raw, n int, extJSON bool) time.Duration {
	ctx := context.Background()
	subject := jetbus.PartitionSubject("bench.raw", 0)
	t0 := time.Now()
	cs, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetStartAfter(start).SetFullDocument(options.UpdateLookup))
	require.NoError(b, err)
	defer cs.Close(ctx)
	for i := 0; i < n; i++ {
		if !cs.Next(ctx) {
			b.Fatal(cs.Err())
		}
		body := []byte(cs.Current.Lookup("fullDocument").Document())
		if extJSON {
			var err error
			if body, err = bson.MarshalExtJSON(bson.Raw(body), false, false); err != nil {
				b.Fatal(err)
			}
		} else {
			body = append([]byte(nil), body...)
		}
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header.Set(jetbus.HeaderMsgID, cs.Current.Lookup("_id", "_data").StringValue())
		m.Header.Set(jetbus.HeaderKey, cs.Current.Lookup("documentKey", "_id").ObjectID().Hex())
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("raw acks did not arrive")
	}
	return time.Since(t0)
}

// feedRound runs a fresh feed from start until it has published n changes.
func feedRound(b *testing.B, bus *jetstream.Bus, kv natsjs.KeyValue, db *mongo.Database, name string, start bson.Raw, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok, err := bson.MarshalExtJSON(start, true, false)
	require.NoError(b, err)
	pos, err := json.Marshal(changefeed.Position{Phase: changefeed.PhaseStream, Token: tok})
	require.NoError(b, err)
	_, err = kv.Put(ctx, name, pos)
	require.NoError(b, err)
	f, err := changefeed.New(ctx, bus, db.Client(), changefeed.Config{Name: name, Database: db.Name(), Collection: "orders", Topic: "bench.feed"})
	require.NoError(b, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	// Timed from when the feed holds its lease (taking it is a one-time cost of a runner):
	// reading the position, opening the stream, reading and publishing.
	deadline := time.Now().Add(time.Minute)
	for {
		st, _ := f.Status(ctx)
		if st.(changefeed.Status).Role == changefeed.RoleActive {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the feed did not become active")
		}
		time.Sleep(50 * time.Microsecond) // polling the feed's role
	}
	t0 := time.Now()
	for {
		st, _ := f.Status(ctx)
		if st.(changefeed.Status).Published >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("feed published %d of %d", st.(changefeed.Status).Published, n)
		}
		time.Sleep(200 * time.Microsecond) // polling the feed's count; a fraction of a round
	}
	d := time.Since(t0)
	cancel()
	<-done
	return d
}
