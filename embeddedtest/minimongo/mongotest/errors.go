package mongotest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var errorTests = map[string]func(t *testing.T, env Env){
	"DocumentTooLarge": documentTooLarge,
	"UnknownCommand": func(t *testing.T, env Env) {
		err := env.DB.RunCommand(ctxFor(t), D("frobnicate", 1)).Err()
		requireCode(t, err, 59)
		ce := commandError(t, err)
		require.Equal(t, "CommandNotFound", ce.Name)
		require.Contains(t, ce.Message, "frobnicate")
	},
	"UnknownQueryOperator": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("e")
		_, err := coll.InsertOne(ctx, D("a", 1))
		require.NoError(t, err)
		_, err = coll.Find(ctx, D("$foo", 1))
		requireCode(t, err, 2)
		require.Contains(t, commandError(t, err).Message, "$foo")
		_, err = coll.Find(ctx, D("a", D("$foo", 1)))
		requireCode(t, err, 2)
		require.Contains(t, commandError(t, err).Message, "$foo")
		_, err = coll.DeleteMany(ctx, D("a", D("$bar", 1)))
		requireCode(t, err, 2)
		_, err = coll.UpdateMany(ctx, D("a", D("$baz", 1)), D("$set", D("b", 1)))
		requireCode(t, err, 2)
	},
	"UnknownUpdateOperator": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("e")
		_, err := coll.InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$frob", D("a", 1)))
		requireCode(t, err, 9)
		require.Contains(t, err.Error(), "$frob")
	},
	"UnknownAggregateStage": func(t *testing.T, env Env) {
		_, err := env.DB.Collection("e").Aggregate(ctxFor(t), A(D("$match", D()), D("$frob", D())))
		requireCode(t, err, 40324)
		require.Contains(t, err.Error(), "$frob")
	},
	"UnknownCommandField": func(t *testing.T, env Env) {
		err := env.DB.RunCommand(ctxFor(t), D("find", "e", "frob", 1)).Err()
		requireCode(t, err, 40415)
		require.Contains(t, err.Error(), "frob")
	},
	"ErrorShape": func(t *testing.T, env Env) {
		raw, err := env.DB.RunCommand(ctxFor(t), D("frobnicate", 1)).Raw()
		require.Error(t, err)
		_ = raw
		ce := commandError(t, err)
		require.Equal(t, int32(59), ce.Code)
		require.NotEmpty(t, ce.Message)
	},
}

// documentTooLarge: MongoDB refuses a document over maxBsonObjectSize however it would be
// written (jstests core max_doc_size): an insert, an upsert, an update whose result grows too
// large, and a pipeline update; each as a write error BSONObjectTooLarge (10334) that leaves the other
// writes of an unordered bulk applied.
func documentTooLarge(t *testing.T, env Env) {
	ctx := ctxFor(t)
	coll := env.DB.Collection("big")
	half := strings.Repeat("a", 9*1024*1024)
	_, err := coll.InsertOne(ctx, D("_id", "i", "x", half+half))
	requireCode(t, err, 10334)
	_, err = coll.InsertOne(ctx, D("_id", "u", "x", half))
	require.NoError(t, err)
	_, err = coll.UpdateOne(ctx, D("_id", "u"), D("$set", D("y", half)))
	requireCode(t, err, 10334)
	_, err = coll.UpdateOne(ctx, D("_id", "u"), A(D("$set", D("y", D("$literal", half)))))
	requireCode(t, err, 10334)
	_, err = coll.UpdateOne(ctx, D("_id", "new"), D("$set", D("x", half+half)), options.UpdateOne().SetUpsert(true))
	requireCode(t, err, 10334)
	res, err := coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(D("_id", "u")).SetUpdate(D("$set", D("y", half))),
		mongo.NewUpdateOneModel().SetFilter(D("_id", "small")).SetUpdate(D("$set", D("y", 1))).SetUpsert(true),
	}, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	require.ErrorAs(t, err, &bwe)
	require.Len(t, bwe.WriteErrors, 1)
	require.Equal(t, 0, bwe.WriteErrors[0].Index)
	require.Equal(t, 10334, bwe.WriteErrors[0].Code)
	require.Equal(t, int64(1), res.UpsertedCount)
	n, err := coll.CountDocuments(ctx, D("_id", D("$in", A("i", "new"))))
	require.NoError(t, err)
	require.Zero(t, n)
}
