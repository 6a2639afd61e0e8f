package minimongo_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/embeddedtest/minimongo/mongotest"
)

// Tests of Options.Dir: the state a server leaves in its directory and what a new server
// started on it finds.

// dump is everything a client can see of a deployment's data: per database its
// listCollections, and per collection its listIndexes and documents in natural order.
func dump(t *testing.T, c *mongo.Client) map[string][]bson.Raw {
	t.Helper()
	ctx := ctx(t)
	out := map[string][]bson.Raw{}
	all := func(cur *mongo.Cursor, err error) []bson.Raw {
		require.NoError(t, err)
		var docs []bson.Raw
		for cur.Next(ctx) {
			docs = append(docs, append(bson.Raw(nil), cur.Current...))
		}
		require.NoError(t, cur.Err())
		return docs
	}
	dbs, err := c.ListDatabaseNames(ctx, bson.D{})
	require.NoError(t, err)
	for _, dn := range dbs {
		db := c.Database(dn)
		colls := all(db.ListCollections(ctx, bson.D{}))
		out[dn] = colls
		for _, ci := range colls {
			name := ci.Lookup("name").StringValue()
			coll := db.Collection(name)
			out[dn+"."+name+" indexes"] = all(coll.Indexes().List(ctx))
			out[dn+"."+name] = all(coll.Find(ctx, bson.D{}))
		}
	}
	return out
}

// events returns the next n events of a change stream.
func events(t *testing.T, cs *mongo.ChangeStream, n int) []bson.Raw {
	t.Helper()
	ctx := ctx(t)
	var out []bson.Raw
	for len(out) < n {
		require.True(t, cs.Next(ctx), "change stream ended: %v", cs.Err())
		out = append(out, append(bson.Raw(nil), cs.Current...))
	}
	return out
}

// stop stops a server, by Close or as a crash would, and lets its client go without
// waiting for the server to come back.
func stop(t *testing.T, s *minimongo.Server, c *mongo.Client, crash bool) {
	t.Helper()
	if crash {
		require.NoError(t, s.Crash())
	} else {
		require.NoError(t, s.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = c.Disconnect(ctx)
}

func clusterTime(t *testing.T, ev bson.Raw) bson.Timestamp {
	t.Helper()
	ts, i, ok := ev.Lookup("clusterTime").TimestampOK()
	require.True(t, ok, "event without clusterTime: %s", ev)
	return bson.Timestamp{T: ts, I: i}
}

func tsAfter(a, b bson.Timestamp) bool { return a.T > b.T || a.T == b.T && a.I > b.I }

func TestPersistRestart(t *testing.T) {
	dir := t.TempDir()
	opts := minimongo.Options{Dir: dir, SnapshotInterval: time.Hour, TTLInterval: 20 * time.Millisecond}
	s1, c1 := startServer(t, opts)
	ctx := ctx(t)

	app := c1.Database("app")
	require.NoError(t, app.CreateCollection(ctx, "orders", options.CreateCollection().
		SetChangeStreamPreAndPostImages(d("enabled", true)).
		SetValidator(d("qty", d("$gte", 0)))))
	orders := app.Collection("orders")
	_, err := orders.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("sku", 1), Options: options.Index().SetUnique(true).SetName("sku_unique")})
	require.NoError(t, err)
	_, err = orders.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("qty", -1, "sku", 1), Options: options.Index().SetPartialFilterExpression(d("qty", d("$gt", 1)))})
	require.NoError(t, err)
	sessions := app.Collection("sessions")
	_, err = sessions.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("at", 1), Options: options.Index().SetExpireAfterSeconds(3600)})
	require.NoError(t, err)

	streamOpts := func() *options.ChangeStreamOptionsBuilder {
		return options.ChangeStream().SetFullDocument(options.WhenAvailable).SetFullDocumentBeforeChange(options.WhenAvailable)
	}
	cs, err := c1.Watch(ctx, mongo.Pipeline{}, streamOpts())
	require.NoError(t, err)

	// documents in every BSON type, in natural order with a deletion, an update and a
	// replacement among them
	for i, sku := range []string{"a", "b", "c"} {
		_, err := orders.InsertOne(ctx, d("_id", i+1, "sku", sku, "qty", i+1))
		require.NoError(t, err)
	}
	_, err = orders.UpdateOne(ctx, d("_id", 2), d("$inc", d("qty", 10)))
	require.NoError(t, err)
	_, err = orders.DeleteOne(ctx, d("_id", 1))
	require.NoError(t, err)
	_, err = orders.ReplaceOne(ctx, d("_id", 3), d("sku", "c", "qty", 30, "note", "replaced"))
	require.NoError(t, err)
	_, err = orders.InsertOne(ctx, d("_id", 4, "sku", "a", "qty", 0))
	require.NoError(t, err)
	dec, err := bson.ParseDecimal128("12.50")
	require.NoError(t, err)
	misc := c1.Database("misc").Collection("values")
	_, err = misc.InsertMany(ctx, []any{
		d("_id", bson.NewObjectID(), "s", "x", "i32", int32(1), "i64", int64(1)<<40, "f", 1.5, "dec", dec,
			"t", true, "n", nil, "dt", bson.NewDateTimeFromTime(time.UnixMilli(1700000000123)),
			"ts", bson.Timestamp{T: 7, I: 3}, "bin", bson.Binary{Subtype: 0x80, Data: []byte{1, 2}},
			"re", bson.Regex{Pattern: "^a", Options: "i"}, "min", bson.MinKey{}, "max", bson.MaxKey{},
			"arr", bson.A{1, "two", d("three", bson.A{})}, "sub", d("a", d("b", d("c", 1)))),
		d("_id", d("composite", 1, "key", "k")),
		d("_id", "string-id"),
	})
	require.NoError(t, err)
	_, err = sessions.InsertOne(ctx, d("_id", "s1", "at", bson.NewDateTimeFromTime(time.Now())))
	require.NoError(t, err)
	// a renamed collection keeps its UUID; a dropped one only its events
	_, err = app.Collection("tmp").InsertOne(ctx, d("_id", 1))
	require.NoError(t, err)
	require.NoError(t, c1.Database("admin").RunCommand(ctx, d("renameCollection", "app.tmp", "to", "app.kept")).Err())
	_, err = app.Collection("gone").InsertOne(ctx, d("_id", 1))
	require.NoError(t, err)
	require.NoError(t, app.Collection("gone").Drop(ctx))
	// a committed transaction
	sess, err := c1.StartSession()
	require.NoError(t, err)
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		if _, err := app.Collection("ledger").InsertOne(ctx, d("_id", 1, "amount", 5)); err != nil {
			return nil, err
		}
		return app.Collection("ledger").InsertOne(ctx, d("_id", 2, "amount", -5))
	})
	require.NoError(t, err)
	sess.EndSession(ctx)

	// 3 inserts, update, delete, replace, insert, 3 inserts, insert, insert, rename,
	// insert, drop, 2 transaction inserts
	seen := events(t, cs, 17)
	require.Equal(t, "insert", seen[16].Lookup("operationType").StringValue())
	require.Equal(t, "ledger", seen[16].Lookup("ns", "coll").StringValue())
	require.Equal(t, seen[15].Lookup("clusterTime"), seen[16].Lookup("clusterTime"), "a transaction's events share a cluster time")
	require.NoError(t, cs.Close(ctx))
	// resume from the update: the old events after it must come back as they were
	require.Equal(t, "update", seen[3].Lookup("operationType").StringValue())
	token := seen[3].Lookup("_id").Document()
	want := seen[4:]

	// an open transaction is not kept
	open, err := c1.StartSession()
	require.NoError(t, err)
	require.NoError(t, open.StartTransaction())
	_, err = orders.InsertOne(mongo.NewSessionContext(ctx, open), d("_id", 99, "sku", "uncommitted", "qty", 1))
	require.NoError(t, err)

	before := dump(t, c1)
	stop(t, s1, c1, false)
	require.FileExists(t, filepath.Join(dir, "state.bson"))

	_, c2 := startServer(t, opts)
	require.Equal(t, before, dump(t, c2), "the restarted server has the data, indexes and options")
	app = c2.Database("app")
	orders = app.Collection("orders")
	require.ErrorIs(t, orders.FindOne(ctx, d("_id", 99)).Err(), mongo.ErrNoDocuments)

	// the change stream resumes from the old token with exactly the old events...
	cs, err = c2.Watch(ctx, mongo.Pipeline{}, streamOpts().SetResumeAfter(token))
	require.NoError(t, err)
	defer cs.Close(ctx)
	got := events(t, cs, len(want))
	for i := range want {
		require.Equal(t, want[i], got[i], "event %d after the token", i)
	}
	// ...then the next write, at a later cluster time, with its images
	_, err = orders.UpdateOne(ctx, d("_id", 2), d("$set", d("qty", 13)))
	require.NoError(t, err)
	next := events(t, cs, 1)[0]
	require.Equal(t, "update", next.Lookup("operationType").StringValue())
	require.Equal(t, int32(2), next.Lookup("documentKey", "_id").Int32())
	require.Equal(t, int32(12), next.Lookup("fullDocumentBeforeChange", "qty").Int32())
	require.Equal(t, int32(13), next.Lookup("fullDocument", "qty").Int32())
	last := clusterTime(t, want[len(want)-1])
	require.True(t, tsAfter(clusterTime(t, next), last), "%v after %v", clusterTime(t, next), last)

	// indexes still enforce, the validator still validates, the TTL index still expires
	_, err = orders.InsertOne(ctx, d("sku", "b", "qty", 1))
	requireCode(t, err, 11000, "sku_unique")
	_, err = orders.InsertOne(ctx, d("sku", "z", "qty", -1))
	requireCode(t, err, 121, "Document failed validation")
	n, err := orders.CountDocuments(ctx, d("sku", "b"))
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	_, err = app.Collection("sessions").InsertOne(ctx, d("_id", "old", "at", bson.NewDateTimeFromTime(time.Now().Add(-2*time.Hour))))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := app.Collection("sessions").CountDocuments(ctx, d("_id", "old"))
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond)
	n, err = app.Collection("sessions").CountDocuments(ctx, d("_id", "s1"))
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	// a new document goes after the loaded ones
	_, err = orders.InsertOne(ctx, d("_id", 5, "sku", "e", "qty", 5))
	require.NoError(t, err)
	cur, err := orders.Find(ctx, bson.D{})
	require.NoError(t, err)
	var ids []int32
	for cur.Next(ctx) {
		ids = append(ids, cur.Current.Lookup("_id").Int32())
	}
	require.Equal(t, []int32{2, 3, 4, 5}, ids)
}

func TestPersistPeriodicSnapshotSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	s1, c1 := startServer(t, minimongo.Options{Dir: dir, SnapshotInterval: 20 * time.Millisecond})
	ctx := ctx(t)
	coll := c1.Database("app").Collection("c")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("k", 1), Options: options.Index().SetUnique(true)})
	require.NoError(t, err)
	cs, err := coll.Watch(ctx, mongo.Pipeline{})
	require.NoError(t, err)
	_, err = coll.InsertMany(ctx, []any{d("_id", 1, "k", "a"), d("_id", 2, "k", "b")})
	require.NoError(t, err)
	seen := events(t, cs, 2)
	require.NoError(t, cs.Close(ctx))
	require.Eventually(t, s1.StateSaved, 10*time.Second, 5*time.Millisecond)
	stop(t, s1, c1, true)

	opts := minimongo.Options{Dir: dir, SnapshotInterval: time.Hour}
	s2, c2 := startServer(t, opts)
	coll = c2.Database("app").Collection("c")
	n2, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(2), n2)
	_, err = coll.InsertOne(ctx, d("_id", 3, "k", "a"))
	requireCode(t, err, 11000, "dup key")
	// the stream resumes; events after the crash sort after everything handed out before it
	cs, err = coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(seen[0].Lookup("_id").Document()))
	require.NoError(t, err)
	defer cs.Close(ctx)
	require.Equal(t, seen[1], events(t, cs, 1)[0])
	_, err = coll.InsertOne(ctx, d("_id", 3, "k", "c"))
	require.NoError(t, err)
	next := events(t, cs, 1)[0]
	require.Equal(t, int32(3), next.Lookup("documentKey", "_id").Int32())
	require.True(t, tsAfter(clusterTime(t, next), clusterTime(t, seen[1])))

	// without a snapshot since, a crash loses what was written
	stop(t, s2, c2, true)
	_, c3 := startServer(t, opts)
	n3, err := c3.Database("app").Collection("c").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(2), n3)
}

func TestPersistOplogWindow(t *testing.T) {
	dir := t.TempDir()
	s1, c1 := startServer(t, minimongo.Options{Dir: dir, OplogSize: 3})
	ctx := ctx(t)
	coll := c1.Database("app").Collection("c")
	cs, err := coll.Watch(ctx, mongo.Pipeline{})
	require.NoError(t, err)
	var seen []bson.Raw
	for i := range 5 {
		_, err := coll.InsertOne(ctx, d("_id", i))
		require.NoError(t, err)
		seen = append(seen, events(t, cs, 1)...) // before the oplog drops it
	}
	require.NoError(t, cs.Close(ctx))
	stop(t, s1, c1, false)
	token := func(i int) *options.ChangeStreamOptionsBuilder {
		return options.ChangeStream().SetResumeAfter(seen[i].Lookup("_id").Document())
	}

	// the first two events are gone, and stay gone
	s2, c2 := startServer(t, minimongo.Options{Dir: dir, OplogSize: 3})
	coll = c2.Database("app").Collection("c")
	_, err = coll.Watch(ctx, mongo.Pipeline{}, token(1))
	requireCode(t, err, 286, "no longer be in the oplog")
	cs, err = coll.Watch(ctx, mongo.Pipeline{}, token(2))
	require.NoError(t, err)
	require.Equal(t, seen[3:], events(t, cs, 2))
	require.NoError(t, cs.Close(ctx))
	stop(t, s2, c2, false)

	// a smaller oplog drops the oldest events on load
	_, c3 := startServer(t, minimongo.Options{Dir: dir, OplogSize: 2})
	coll = c3.Database("app").Collection("c")
	_, err = coll.Watch(ctx, mongo.Pipeline{}, token(2))
	requireCode(t, err, 286, "no longer be in the oplog")
	cs, err = coll.Watch(ctx, mongo.Pipeline{}, token(3))
	require.NoError(t, err)
	defer cs.Close(ctx)
	require.Equal(t, seen[4:], events(t, cs, 1))
}

func TestPersistBadStateFile(t *testing.T) {
	// a valid file to damage
	good := t.TempDir()
	s, c := startServer(t, minimongo.Options{Dir: good})
	_, err := c.Database("app").Collection("c").InsertOne(ctx(t), d("_id", 1, "payload", "payload-abcdefgh"))
	require.NoError(t, err)
	stop(t, s, c, false)
	valid, err := os.ReadFile(filepath.Join(good, "state.bson"))
	require.NoError(t, err)
	record := func(doc bson.D) []byte {
		b, err := bson.Marshal(doc)
		require.NoError(t, err)
		return b
	}
	flipped := bytes.Replace(valid, []byte("payload-abcdefgh"), []byte("payload-abcdefgX"), 1)
	require.NotEqual(t, valid, flipped)

	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"garbage", "is corrupt", []byte("this is not BSON at all")},
		{"empty", "is corrupt (truncated after 0 records)", nil},
		{"truncated", "is corrupt (truncated", valid[:len(valid)-30]},
		{"bit flip", "is corrupt (checksum mismatch)", flipped},
		{"trailing data", "is corrupt (data after the end record)", append(append([]byte(nil), valid...), valid...)},
		{"other file", "is not a minimongo state file", record(d("hello", "world"))},
		{"future version", "has format version 2; this minimongo reads version 1 only", record(d("format", "minimongo-state", "version", int32(2)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.bson")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			s, err := minimongo.Start(minimongo.Options{Dir: dir})
			require.Nil(t, s)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestPersistConformance runs the conformance suite on a server that snapshots all the
// while, then checks that what it left loads, saves and loads again unchanged.
func TestPersistConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("a second conformance run")
	}
	dir := t.TempDir()
	t.Run("suite", func(t *testing.T) {
		s, c := startServer(t, minimongo.Options{Dir: dir, SnapshotInterval: 5 * time.Millisecond, TTLInterval: 50 * time.Millisecond, OplogSize: 1 << 20})
		mongotest.Run(t, func(t *testing.T) mongotest.Env {
			return mongotest.Env{DB: c.Database(fmt.Sprintf("pconf%d", dbSeq.Add(1))), URI: s.URI()}
		})
		require.Positive(t, s.SnapshotsWritten())
	})
	// TTL sweeps would change the data between the dumps
	opts := minimongo.Options{Dir: dir, TTLInterval: time.Hour, OplogSize: 1 << 20}
	oplog := func(c *mongo.Client) []bson.Raw {
		cs, err := c.Watch(ctx(t), mongo.Pipeline{}, options.ChangeStream().SetStartAtOperationTime(&bson.Timestamp{T: 1}))
		require.NoError(t, err)
		defer cs.Close(ctx(t))
		var evs []bson.Raw
		for cs.TryNext(ctx(t)) {
			evs = append(evs, append(bson.Raw(nil), cs.Current...))
		}
		require.NoError(t, cs.Err())
		return evs
	}
	s1, c1 := startServer(t, opts)
	first, firstOplog := dump(t, c1), oplog(c1)
	require.NotEmpty(t, first)
	require.NotEmpty(t, firstOplog)
	stop(t, s1, c1, false)
	_, c2 := startServer(t, opts)
	require.Equal(t, first, dump(t, c2))
	require.Equal(t, firstOplog, oplog(c2))
}
