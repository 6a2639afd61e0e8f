package mongotest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

type changeEvent struct {
	ID            bson.Raw       `bson:"_id"`
	OperationType string         `bson:"operationType"`
	ClusterTime   bson.Timestamp `bson:"clusterTime"`
	WallTime      time.Time      `bson:"wallTime"`
	NS            struct {
		DB   string `bson:"db"`
		Coll string `bson:"coll"`
	} `bson:"ns"`
	DocumentKey       bson.D `bson:"documentKey"`
	FullDocument      bson.D `bson:"fullDocument"`
	FullDocBefore     bson.D `bson:"fullDocumentBeforeChange"`
	UpdateDescription *struct {
		UpdatedFields bson.D   `bson:"updatedFields"`
		RemovedFields []string `bson:"removedFields"`
	} `bson:"updateDescription"`
	LSID      bson.D `bson:"lsid"`
	TxnNumber *int64 `bson:"txnNumber"`
	raw       bson.Raw
}

func next(t *testing.T, cs *mongo.ChangeStream) changeEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.True(t, cs.Next(ctx), "no change event: %v", cs.Err())
	var ev changeEvent
	require.NoError(t, cs.Decode(&ev))
	ev.raw = append(bson.Raw(nil), cs.Current...)
	return ev
}

// requireNoEvent asserts that a getMore round trip returns nothing. The first TryNext after
// Watch may only consume the (empty) initial batch, so it tries twice.
func requireNoEvent(t *testing.T, cs *mongo.ChangeStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		require.False(t, cs.TryNext(ctx), "unexpected event %v", cs.Current)
		require.NoError(t, cs.Err())
	}
}

func watch(t *testing.T, w interface {
	Watch(context.Context, any, ...options.Lister[options.ChangeStreamOptions]) (*mongo.ChangeStream, error)
}, pipeline any, opts ...*options.ChangeStreamOptionsBuilder) *mongo.ChangeStream {
	t.Helper()
	ctx := ctxFor(t)
	if pipeline == nil {
		pipeline = A()
	}
	o := options.ChangeStream().SetMaxAwaitTime(200 * time.Millisecond)
	var lst []options.Lister[options.ChangeStreamOptions]
	lst = append(lst, o)
	for _, x := range opts {
		lst = append(lst, x)
	}
	cs, err := w.Watch(ctx, pipeline, lst...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close(context.Background()) })
	return cs
}

func tokenData(t *testing.T, tok bson.Raw) string {
	t.Helper()
	s, ok := tok.Lookup("_data").StringValueOK()
	require.True(t, ok, "resume token without _data: %v", tok)
	return s
}

var changeStreamTests = map[string]func(t *testing.T, env Env){
	"ResumesAutomaticallyAfterNetworkError": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		d := &replyDropper{}
		c := newClient(t, env, options.Client().SetDialer(d))
		coll := c.Database(env.DB.Name()).Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, nil)
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		requireJSON(t, `{"_id":1}`, next(t, cs).DocumentKey)
		_, err = coll.InsertMany(ctx, []any{D("_id", 2), D("_id", 3)})
		require.NoError(t, err)
		d.arm("getMore") // the reply carrying events 2 and 3 is lost
		requireJSON(t, `{"_id":2}`, next(t, cs).DocumentKey)
		requireJSON(t, `{"_id":3}`, next(t, cs).DocumentKey)
		require.Equal(t, 1, d.count())
		requireNoEvent(t, cs)
	},
	"CollectionEvents": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, nil)
		_, err := coll.InsertOne(ctx, D("_id", 1, "a", 1, "b", D("c", 1, "d", 1)))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("a", 2, "b.c", 5), "$unset", D("b.d", "")))
		require.NoError(t, err)
		_, err = coll.ReplaceOne(ctx, D("_id", 1), D("z", 1))
		require.NoError(t, err)
		_, err = coll.DeleteOne(ctx, D("_id", 1))
		require.NoError(t, err)
		_, err = env.DB.Collection("other").InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)

		ev := next(t, cs)
		require.Equal(t, "insert", ev.OperationType)
		require.Equal(t, env.DB.Name(), ev.NS.DB)
		require.Equal(t, "cs", ev.NS.Coll)
		requireJSON(t, `{"_id":1}`, ev.DocumentKey)
		requireJSON(t, `{"_id":1,"a":1,"b":{"c":1,"d":1}}`, ev.FullDocument)
		require.NotZero(t, ev.ClusterTime.T)
		require.False(t, ev.WallTime.IsZero())
		first := tokenData(t, ev.ID)

		ev = next(t, cs)
		require.Equal(t, "update", ev.OperationType)
		require.Nil(t, ev.FullDocument)
		require.NotNil(t, ev.UpdateDescription)
		requireJSON(t, `{"a":2,"b.c":5}`, ev.UpdateDescription.UpdatedFields)
		require.Equal(t, []string{"b.d"}, ev.UpdateDescription.RemovedFields)
		second := tokenData(t, ev.ID)
		require.Less(t, first, second, "resume tokens are ordered")

		ev = next(t, cs)
		require.Equal(t, "replace", ev.OperationType)
		requireJSON(t, `{"_id":1,"z":1}`, ev.FullDocument)
		ev = next(t, cs)
		require.Equal(t, "delete", ev.OperationType)
		requireJSON(t, `{"_id":1}`, ev.DocumentKey)
		require.Nil(t, ev.FullDocument)
		requireNoEvent(t, cs)
	},
	"FullDocumentModes": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		plain := env.DB.Collection("plain")
		require.NoError(t, env.DB.CreateCollection(ctx, "plain"))
		require.NoError(t, env.DB.CreateCollection(ctx, "images", options.CreateCollection().SetChangeStreamPreAndPostImages(D("enabled", true))))
		images := env.DB.Collection("images")
		lookup := watch(t, plain, nil, options.ChangeStream().SetFullDocument(options.UpdateLookup))
		when := watch(t, plain, nil, options.ChangeStream().SetFullDocument(options.WhenAvailable))
		post := watch(t, images, nil, options.ChangeStream().SetFullDocument(options.Required).SetFullDocumentBeforeChange(options.WhenAvailable))
		for _, c := range []*mongo.Collection{plain, images} {
			_, err := c.InsertOne(ctx, D("_id", 1, "v", 1))
			require.NoError(t, err)
			_, err = c.UpdateOne(ctx, D("_id", 1), D("$set", D("v", 2)))
			require.NoError(t, err)
			_, err = c.UpdateOne(ctx, D("_id", 1), D("$set", D("v", 3)))
			require.NoError(t, err)
		}
		require.Equal(t, "insert", next(t, lookup).OperationType)
		ev := next(t, lookup)
		require.Equal(t, "update", ev.OperationType)
		requireJSON(t, `{"_id":1,"v":3}`, ev.FullDocument) // looked up at read time
		require.Equal(t, "insert", next(t, when).OperationType)
		ev = next(t, when)
		require.Nil(t, ev.FullDocument)
		fd, err := ev.raw.LookupErr("fullDocument")
		require.NoError(t, err)
		require.Equal(t, bson.TypeNull, fd.Type)
		require.Equal(t, "insert", next(t, post).OperationType)
		ev = next(t, post)
		requireJSON(t, `{"_id":1,"v":2}`, ev.FullDocument) // post-image of this update
		requireJSON(t, `{"_id":1,"v":1}`, ev.FullDocBefore)
		ev = next(t, post)
		requireJSON(t, `{"_id":1,"v":3}`, ev.FullDocument)
	},
	"DropInvalidatesAndStartAfter": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, nil)
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		require.NoError(t, coll.Drop(ctx))
		require.Equal(t, "insert", next(t, cs).OperationType)
		ev := next(t, cs)
		require.Equal(t, "drop", ev.OperationType)
		require.Equal(t, "cs", ev.NS.Coll)
		inv := next(t, cs)
		require.Equal(t, "invalidate", inv.OperationType)
		require.False(t, cs.Next(ctx))
		require.NoError(t, cs.Err())
		require.Zero(t, cs.ID())

		_, err = coll.Watch(ctx, A(), options.ChangeStream().SetResumeAfter(inv.ID))
		requireCode(t, err, 260)
		after := watch(t, coll, nil, options.ChangeStream().SetStartAfter(inv.ID))
		_, err = coll.InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)
		ev = next(t, after)
		require.Equal(t, "insert", ev.OperationType)
		requireJSON(t, `{"_id":2}`, ev.DocumentKey)
	},
	"DatabaseAndCluster": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		other := env.DB.Client().Database(env.DB.Name() + "_2")
		t.Cleanup(func() { _ = other.Drop(context.Background()) })
		dbs := watch(t, env.DB, nil)
		cluster := watch(t, env.DB.Client(), A(D("$match", D("ns.db", D("$in", A(env.DB.Name(), other.Name()))))))
		_, err := env.DB.Collection("a").InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		_, err = env.DB.Collection("b").InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)
		_, err = other.Collection("c").InsertOne(ctx, D("_id", 3))
		require.NoError(t, err)
		require.NoError(t, env.DB.Drop(ctx))

		ev := next(t, dbs)
		require.Equal(t, "a", ev.NS.Coll)
		ev = next(t, dbs)
		require.Equal(t, "b", ev.NS.Coll)
		var dropped []string
		for i := 0; i < 2; i++ {
			ev = next(t, dbs)
			require.Equal(t, "drop", ev.OperationType)
			dropped = append(dropped, ev.NS.Coll)
		}
		require.ElementsMatch(t, []string{"a", "b"}, dropped)
		ev = next(t, dbs)
		require.Equal(t, "dropDatabase", ev.OperationType)
		require.Equal(t, env.DB.Name(), ev.NS.DB)
		require.Equal(t, "invalidate", next(t, dbs).OperationType)

		var seen []string
		for i := 0; i < 3; i++ {
			ev = next(t, cluster)
			require.Equal(t, "insert", ev.OperationType)
			seen = append(seen, ev.NS.DB+"."+ev.NS.Coll)
		}
		require.Equal(t, []string{env.DB.Name() + ".a", env.DB.Name() + ".b", other.Name() + ".c"}, seen)
		for i := 0; i < 3; i++ {
			require.Contains(t, []string{"drop", "dropDatabase"}, next(t, cluster).OperationType)
		}
		requireNoEvent(t, cluster) // a deployment stream is not invalidated by dropDatabase
	},
	"ResumeAfterAndStartAtOperationTime": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, nil)
		for i := 1; i <= 3; i++ {
			_, err := coll.InsertOne(ctx, D("_id", i))
			require.NoError(t, err)
		}
		first := next(t, cs)
		require.NoError(t, cs.Close(ctx))

		resumed := watch(t, coll, nil, options.ChangeStream().SetResumeAfter(first.ID))
		requireJSON(t, `{"_id":2}`, next(t, resumed).DocumentKey)
		requireJSON(t, `{"_id":3}`, next(t, resumed).DocumentKey)
		requireNoEvent(t, resumed)

		at := watch(t, coll, nil, options.ChangeStream().SetStartAtOperationTime(&first.ClusterTime))
		for i := 1; i <= 3; i++ {
			requireJSON(t, `{"_id":`+string(rune('0'+i))+`}`, next(t, at).DocumentKey)
		}
		// the post-batch resume token covers an empty batch
		requireNoEvent(t, at)
		tok := at.ResumeToken()
		require.NotNil(t, tok)
		_, err := coll.InsertOne(ctx, D("_id", 4))
		require.NoError(t, err)
		fromPBRT := watch(t, coll, nil, options.ChangeStream().SetResumeAfter(tok))
		requireJSON(t, `{"_id":4}`, next(t, fromPBRT).DocumentKey)
	},
	"ResumeAfterClientRestart": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		c1 := newClient(t, env)
		coll1 := c1.Database(env.DB.Name()).Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll1, nil)
		for i := 1; i <= 2; i++ {
			_, err := coll1.InsertOne(ctx, D("_id", i))
			require.NoError(t, err)
		}
		next(t, cs)
		next(t, cs)
		saved := append(bson.Raw(nil), cs.ResumeToken()...)
		require.NoError(t, c1.Disconnect(ctx))

		// writes while no client is watching
		coll := env.DB.Collection("cs")
		_, err := coll.InsertOne(ctx, D("_id", 3))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("x", 1)))
		require.NoError(t, err)

		c2 := newClient(t, env)
		resumed := watch(t, c2.Database(env.DB.Name()).Collection("cs"), nil, options.ChangeStream().SetResumeAfter(saved))
		ev := next(t, resumed)
		require.Equal(t, "insert", ev.OperationType)
		requireJSON(t, `{"_id":3}`, ev.DocumentKey)
		ev = next(t, resumed)
		require.Equal(t, "update", ev.OperationType)
		requireJSON(t, `{"_id":1}`, ev.DocumentKey)
		requireNoEvent(t, resumed)
	},
	"TransactionEventsAtCommit": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		require.NoError(t, env.DB.CreateCollection(ctx, "a"))
		require.NoError(t, env.DB.CreateCollection(ctx, "b"))
		cs := watch(t, env.DB, nil)
		sess, err := env.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		require.NoError(t, sess.StartTransaction())
		sctx := mongo.NewSessionContext(ctx, sess)
		_, err = env.DB.Collection("a").InsertOne(sctx, D("_id", 1))
		require.NoError(t, err)
		_, err = env.DB.Collection("b").InsertOne(sctx, D("_id", 2))
		require.NoError(t, err)
		_, err = env.DB.Collection("a").UpdateOne(sctx, D("_id", 1), D("$set", D("v", 1)))
		require.NoError(t, err)
		requireNoEvent(t, cs) // nothing before commit
		require.NoError(t, sess.CommitTransaction(ctx))
		want := []string{"insert a", "insert b", "update a"}
		var prev string
		for i, w := range want {
			ev := next(t, cs)
			require.Equal(t, w, ev.OperationType+" "+ev.NS.Coll)
			require.NotNil(t, ev.TxnNumber)
			require.NotEmpty(t, ev.LSID)
			tok := tokenData(t, ev.ID)
			if i > 0 {
				require.Less(t, prev, tok, "tokens of one transaction are ordered")
			}
			prev = tok
		}
	},
	"PipelineAfterChangeStream": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, A(
			D("$match", D("operationType", "insert", "fullDocument.keep", true)),
			D("$project", D("operationType", 1, "fullDocument.v", 1)),
		))
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "keep", false, "v", 1), D("_id", 2, "keep", true, "v", 2)})
		require.NoError(t, err)
		_, err = coll.DeleteMany(ctx, D())
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 3, "keep", true, "v", 3))
		require.NoError(t, err)
		ev := next(t, cs)
		requireJSON(t, `{"v":2}`, ev.FullDocument)
		require.Nil(t, ev.DocumentKey)
		ev = next(t, cs)
		requireJSON(t, `{"v":3}`, ev.FullDocument)
		requireNoEvent(t, cs)
	},
	"GetMoreAwaitsNewEvents": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("cs")
		require.NoError(t, env.DB.CreateCollection(ctx, "cs"))
		cs := watch(t, coll, nil, options.ChangeStream().SetMaxAwaitTime(300*time.Millisecond))
		start := time.Now()
		requireNoEvent(t, cs)
		require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)

		long := watch(t, coll, nil, options.ChangeStream().SetMaxAwaitTime(20*time.Second))
		done := make(chan changeEvent, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if long.Next(ctx) {
				var ev changeEvent
				_ = long.Decode(&ev)
				done <- ev
			}
			close(done)
		}()
		start = time.Now()
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		ev, ok := <-done
		require.True(t, ok)
		require.Equal(t, "insert", ev.OperationType)
		require.Less(t, time.Since(start), 15*time.Second, "a waiting getMore returns as soon as an event arrives")
	},
}
