package minimongo_test

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// Tests of behaviour specific to the backend: its limits, options and failure modes. The
// conformance suite covers what it shares with MongoDB.

func d(kv ...any) bson.D {
	out := bson.D{}
	for i := 0; i < len(kv); i += 2 {
		out = append(out, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func requireCode(t *testing.T, err error, code int, contains string) {
	t.Helper()
	require.Error(t, err)
	var se mongo.ServerError
	require.ErrorAs(t, err, &se)
	require.True(t, se.HasErrorCode(code), "want code %d, got %v", code, err)
	require.Contains(t, err.Error(), contains)
}

func TestUnsupportedFailsLoudly(t *testing.T) {
	_, c := startServer(t, minimongo.Options{})
	ctx := ctx(t)
	db := c.Database("u")
	coll := db.Collection("c")
	_, err := coll.InsertOne(ctx, d("_id", 1, "a", bson.A{1, 2}))
	require.NoError(t, err)

	_, err = coll.Find(ctx, d("$where", "this.a > 1"))
	requireCode(t, err, 2, "$where")
	_, err = coll.Find(ctx, d("$jsonSchema", d("required", bson.A{"a"})))
	requireCode(t, err, 2, "$jsonSchema")
	_, err = coll.Find(ctx, d("loc", d("$near", bson.A{0, 0})))
	requireCode(t, err, 2, "$near")
	_, err = coll.Aggregate(ctx, bson.A{d("$facet", d("x", bson.A{}))})
	requireCode(t, err, 2, "$facet")
	_, err = coll.Aggregate(ctx, bson.A{d("$lookup", d("from", "x", "pipeline", bson.A{}, "as", "y"))})
	requireCode(t, err, 2, "$lookup with pipeline")
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("p", 1), Options: options.Index().SetPartialFilterExpression(d("$expr", true))})
	requireCode(t, err, 67, "$expr")
	_, err = coll.Aggregate(ctx, bson.A{d("$project", d("x", d("$sqrt", 4)))})
	requireCode(t, err, 168, "$sqrt")
	_, err = coll.Find(ctx, d(), options.Find().SetCollation(&options.Collation{Locale: "fr"}))
	requireCode(t, err, 2, "collation")
	_, err = coll.UpdateOne(ctx, d("a", 1), d("$set", d("a.$[y]", 5)))
	requireCode(t, err, 2, "a.$[y]")
	_, err = coll.UpdateOne(ctx, d("_id", 1), bson.A{d("$fill", d("output", d("b", d("value", 1))))})
	requireCode(t, err, 2, "$fill")
	_, err = coll.UpdateOne(ctx, d("_id", 1), bson.A{d("$set", d("b", "$$c"))}, options.UpdateOne().SetLet(d("c", 1)).SetHint("_id_").SetCollation(&options.Collation{Locale: "fr"}))
	requireCode(t, err, 2, "collation")
	_, err = coll.Find(ctx, d(), options.Find().SetProjection(d("a", d("$slice", 1))))
	requireCode(t, err, 2, "$slice")
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("t", "text")})
	requireCode(t, err, 2, "text")
	err = db.CreateCollection(ctx, "capped", options.CreateCollection().SetCapped(true).SetSizeInBytes(1024))
	requireCode(t, err, 2, "capped")
	err = db.RunCommand(ctx, d("find", "c", "readConcern", d("level", "snapshot", "atClusterTime", bson.Timestamp{T: 1, I: 1}))).Err()
	requireCode(t, err, 239, "older than the oldest available") // snapshot history is kept, not forever
	_, err = coll.Find(ctx, d(), options.Find().SetCollation(&options.Collation{Locale: "en", Strength: 2}))
	requireCode(t, err, 2, "collation")
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("s", 1), Options: options.Index().SetCollation(&options.Collation{Locale: "de"})})
	requireCode(t, err, 2, "collation")
	_, err = coll.DeleteOne(ctx, d("s", "x"), options.DeleteOne().SetCollation(&options.Collation{Locale: "fr"}))
	requireCode(t, err, 2, "collation")
	err = db.CreateCollection(ctx, "coll_fr", options.CreateCollection().SetCollation(&options.Collation{Locale: "fr"}))
	requireCode(t, err, 2, "collation")
	_, err = coll.Watch(ctx, bson.A{d("$group", d("_id", nil))})
	requireCode(t, err, 20, "$group")
	err = c.Database("admin").RunCommand(ctx, d("renameCollection", "u.c", "to", "other.d")).Err()
	requireCode(t, err, 2, "renameCollection across databases")
	err = db.RunCommand(ctx, d("collMod", "c", "validator", d("$jsonSchema", d("required", bson.A{"a"})))).Err()
	requireCode(t, err, 2, "$jsonSchema")
	// nothing was changed by the rejected writes
	raw, err := coll.FindOne(ctx, d("_id", 1)).Raw()
	require.NoError(t, err)
	require.Equal(t, `{"_id": {"$numberInt":"1"},"a": [{"$numberInt":"1"},{"$numberInt":"2"}]}`, raw.String())
}

func TestChangeStreamHistoryLost(t *testing.T) {
	_, c := startServer(t, minimongo.Options{OplogSize: 5})
	ctx := ctx(t)
	coll := c.Database("h").Collection("c")
	require.NoError(t, c.Database("h").CreateCollection(ctx, "c"))
	cs, err := coll.Watch(ctx, bson.A{})
	require.NoError(t, err)
	defer cs.Close(ctx)
	slow, err := coll.Watch(ctx, bson.A{})
	require.NoError(t, err)
	defer slow.Close(ctx)
	_, err = coll.InsertOne(ctx, d("_id", 0))
	require.NoError(t, err)
	require.True(t, cs.Next(ctx))
	token := cs.ResumeToken()
	var first struct {
		ClusterTime bson.Timestamp `bson:"clusterTime"`
	}
	require.NoError(t, cs.Decode(&first))

	// within the bound, resuming works
	resumed, err := coll.Watch(ctx, bson.A{}, options.ChangeStream().SetResumeAfter(token))
	require.NoError(t, err)
	_, err = coll.InsertOne(ctx, d("_id", 1))
	require.NoError(t, err)
	require.True(t, resumed.Next(ctx))
	require.NoError(t, resumed.Close(ctx))

	for i := 2; i < 10; i++ {
		_, err = coll.InsertOne(ctx, d("_id", i))
		require.NoError(t, err)
	}
	_, err = coll.Watch(ctx, bson.A{}, options.ChangeStream().SetResumeAfter(token))
	requireCode(t, err, 286, "Resume of change stream was not possible")
	_, err = coll.Watch(ctx, bson.A{}, options.ChangeStream().SetStartAtOperationTime(&first.ClusterTime))
	requireCode(t, err, 286, "oplog")
	// a stream that fell behind the oplog fails on its next getMore
	require.False(t, slow.Next(ctx))
	requireCode(t, slow.Err(), 286, "oplog")
}

func TestIdleCursorsTimeOut(t *testing.T) {
	_, c := startServer(t, minimongo.Options{CursorTimeout: 100 * time.Millisecond, TTLInterval: 20 * time.Millisecond})
	ctx := ctx(t)
	db := c.Database("cur")
	docs := make([]any, 100)
	for i := range docs {
		docs[i] = d("_id", i)
	}
	_, err := db.Collection("c").InsertMany(ctx, docs)
	require.NoError(t, err)
	cur, err := db.Collection("c").Find(ctx, d(), options.Find().SetBatchSize(1))
	require.NoError(t, err)
	id := cur.ID()
	require.NotZero(t, id)
	// Each poll comes later than the timeout, so the idle cursor is gone by then.
	var last error
	require.Eventually(t, func() bool {
		last = db.RunCommand(ctx, d("getMore", id, "collection", "c", "batchSize", int32(1))).Err()
		return last != nil
	}, 10*time.Second, 300*time.Millisecond)
	requireCode(t, last, 43, "not found")
}

func TestTransactionLifetimeLimit(t *testing.T) {
	_, c := startServer(t, minimongo.Options{TransactionLifetime: 100 * time.Millisecond, TTLInterval: 20 * time.Millisecond})
	ctx := ctx(t)
	coll := c.Database("tx").Collection("c")
	_, err := coll.InsertOne(ctx, d("_id", 1))
	require.NoError(t, err)
	sess, err := c.StartSession()
	require.NoError(t, err)
	defer sess.EndSession(ctx)
	require.NoError(t, sess.StartTransaction())
	_, err = coll.UpdateOne(mongo.NewSessionContext(ctx, sess), d("_id", 1), d("$set", d("tx", true)))
	require.NoError(t, err)
	// This write waits for the transaction's lock, which is released when the server
	// aborts the expired transaction.
	_, err = coll.UpdateOne(ctx, d("_id", 1), d("$set", d("x", 1)))
	require.NoError(t, err)
	requireCode(t, sess.CommitTransaction(ctx), 251, "aborted")
	raw, err := coll.FindOne(ctx, d("_id", 1)).Raw()
	require.NoError(t, err)
	require.Equal(t, `{"_id": {"$numberInt":"1"},"x": {"$numberInt":"1"}}`, raw.String())
}

func TestWriteWaitsForTransactionLock(t *testing.T) {
	_, c := startServer(t, minimongo.Options{})
	ctx := ctx(t)
	coll := c.Database("lock").Collection("c")
	_, err := coll.InsertOne(ctx, d("_id", 1, "n", 0))
	require.NoError(t, err)
	sess, err := c.StartSession()
	require.NoError(t, err)
	defer sess.EndSession(ctx)
	require.NoError(t, sess.StartTransaction())
	_, err = coll.UpdateOne(mongo.NewSessionContext(ctx, sess), d("_id", 1), d("$inc", d("n", 1)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := coll.UpdateOne(ctx, d("_id", 1), d("$inc", d("n", 10)))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("write to a document locked by a transaction completed early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, sess.CommitTransaction(ctx))
	require.NoError(t, <-done)
	var got struct {
		N int `bson:"n"`
	}
	require.NoError(t, coll.FindOne(ctx, d("_id", 1)).Decode(&got))
	require.Equal(t, 11, got.N)
}

func TestWriteWaitsForTransactionUniqueKey(t *testing.T) {
	_, c := startServer(t, minimongo.Options{})
	ctx := ctx(t)
	coll := c.Database("lock").Collection("u")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: d("k", 1), Options: options.Index().SetUnique(true)})
	require.NoError(t, err)
	for _, commit := range []bool{true, false} {
		sess, err := c.StartSession()
		require.NoError(t, err)
		require.NoError(t, sess.StartTransaction())
		_, err = coll.InsertOne(mongo.NewSessionContext(ctx, sess), d("k", commit))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := coll.InsertOne(ctx, d("k", commit))
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("insert of a unique key held by a transaction completed early: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if commit {
			require.NoError(t, sess.CommitTransaction(ctx))
			require.True(t, mongo.IsDuplicateKeyError(<-done))
		} else {
			require.NoError(t, sess.AbortTransaction(ctx))
			require.NoError(t, <-done)
		}
		sess.EndSession(ctx)
	}
}

func TestCloseStopsWaitingOperations(t *testing.T) {
	s, err := minimongo.Start(minimongo.Options{})
	require.NoError(t, err)
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, reply := roundTrip(t, conn, opMsg(t, 1, 0, d("aggregate", "c", "$db", "x", "pipeline", bson.A{d("$changeStream", d())}, "cursor", d()), "", nil))
	cur, _ := reply["cursor"].(bson.D)
	var id int64
	for _, e := range cur {
		if e.Key == "id" {
			id, _ = e.Value.(int64)
		}
	}
	require.NotZero(t, id)
	// a getMore that would wait a minute for events
	_, err = conn.Write(opMsg(t, 2, 0, d("getMore", id, "collection", "c", "$db", "x", "maxTimeMS", int64(60000)), "", nil))
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a getMore was waiting")
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadAll(conn)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection is closed by the server, not timed out: %v", err)
	require.NoError(t, s.Close())
}

// raw wire protocol

func opMsg(t *testing.T, reqID uint32, flags uint32, body bson.D, seqID string, seq []bson.D) []byte {
	b, err := bson.Marshal(body)
	require.NoError(t, err)
	msg := make([]byte, 16)
	msg = binary.LittleEndian.AppendUint32(msg, flags)
	msg = append(msg, 0)
	msg = append(msg, b...)
	if seqID != "" {
		var docs []byte
		for _, d := range seq {
			x, err := bson.Marshal(d)
			require.NoError(t, err)
			docs = append(docs, x...)
		}
		msg = append(msg, 1)
		msg = binary.LittleEndian.AppendUint32(msg, uint32(4+len(seqID)+1+len(docs)))
		msg = append(msg, seqID...)
		msg = append(msg, 0)
		msg = append(msg, docs...)
	}
	if flags&1 != 0 {
		msg = append(msg, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:], reqID)
	binary.LittleEndian.PutUint32(msg[12:], 2013)
	if flags&1 != 0 {
		sum := crc32.Checksum(msg[:len(msg)-4], crc32.MakeTable(crc32.Castagnoli))
		binary.LittleEndian.PutUint32(msg[len(msg)-4:], sum)
	}
	return msg
}

func roundTrip(t *testing.T, conn net.Conn, msg []byte) (int32, bson.M) {
	_, err := conn.Write(msg)
	require.NoError(t, err)
	var hdr [16]byte
	_, err = io.ReadFull(conn, hdr[:])
	require.NoError(t, err)
	rest := make([]byte, binary.LittleEndian.Uint32(hdr[:])-16)
	_, err = io.ReadFull(conn, rest)
	require.NoError(t, err)
	op := int32(binary.LittleEndian.Uint32(hdr[12:]))
	var doc []byte
	switch op {
	case 2013:
		doc = rest[5:]
	case 1:
		doc = rest[20:]
	}
	var out bson.M
	require.NoError(t, bson.Unmarshal(doc, &out))
	return op, out
}

func TestWireProtocol(t *testing.T) {
	s, err := minimongo.Start(minimongo.Options{})
	require.NoError(t, err)
	defer s.Close()
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()

	// checksummed OP_MSG
	op, reply := roundTrip(t, conn, opMsg(t, 1, 1, d("ping", 1, "$db", "admin"), "", nil))
	require.Equal(t, int32(2013), op)
	require.Equal(t, 1.0, reply["ok"])

	// document sequence (kind 1)
	_, reply = roundTrip(t, conn, opMsg(t, 2, 0, d("insert", "c", "$db", "w"), "documents", []bson.D{d("_id", 1), d("_id", 2)}))
	require.Equal(t, int32(2), reply["n"])

	// moreToCome: no reply, the next request still works
	_, err = conn.Write(opMsg(t, 3, 2, d("insert", "c", "$db", "w", "writeConcern", d("w", 0)), "documents", []bson.D{d("_id", 3)}))
	require.NoError(t, err)
	_, reply = roundTrip(t, conn, opMsg(t, 4, 0, d("count", "c", "$db", "w"), "", nil))
	require.Equal(t, int32(3), reply["n"])

	// legacy OP_QUERY handshake
	q := make([]byte, 16)
	q = binary.LittleEndian.AppendUint32(q, 0)
	q = append(q, "admin.$cmd\x00"...)
	q = binary.LittleEndian.AppendUint32(q, 0)
	q = binary.LittleEndian.AppendUint32(q, 1)
	body, err := bson.Marshal(d("isMaster", 1))
	require.NoError(t, err)
	q = append(q, body...)
	binary.LittleEndian.PutUint32(q[0:], uint32(len(q)))
	binary.LittleEndian.PutUint32(q[4:], 5)
	binary.LittleEndian.PutUint32(q[12:], 2004)
	op, reply = roundTrip(t, conn, q)
	require.Equal(t, int32(1), op)
	require.Equal(t, true, reply["ismaster"])
	require.Equal(t, "rs0", reply["setName"])
	require.NotContains(t, reply, "compression")

	// a bad checksum closes the connection
	bad := opMsg(t, 6, 1, d("ping", 1, "$db", "admin"), "", nil)
	bad[len(bad)-1] ^= 0xff
	_, err = conn.Write(bad)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err)
}
