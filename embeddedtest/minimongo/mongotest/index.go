package mongotest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func dupKey(t *testing.T, err error) mongo.WriteError {
	t.Helper()
	var we mongo.WriteException
	require.ErrorAs(t, err, &we)
	require.Len(t, we.WriteErrors, 1)
	require.Equal(t, 11000, we.WriteErrors[0].Code)
	require.True(t, mongo.IsDuplicateKeyError(err))
	return we.WriteErrors[0]
}

var indexTests = map[string]func(t *testing.T, env Env){
	"CreateListDrop": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("i")
		names, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
			{Keys: D("a", 1)},
			{Keys: D("b", -1, "c", 1), Options: options.Index().SetUnique(true).SetName("bc")},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"a_1", "bc"}, names)
		// creating the same index again is a no-op
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("a", 1)})
		require.NoError(t, err)
		specs, err := coll.Indexes().ListSpecifications(ctx)
		require.NoError(t, err)
		require.Len(t, specs, 3)
		require.Equal(t, "_id_", specs[0].Name)
		require.Equal(t, "bc", specs[2].Name)
		require.NotNil(t, specs[2].Unique)
		require.True(t, *specs[2].Unique)
		requireJSON(t, `{"b":-1,"c":1}`, specs[2].KeysDocument)
		require.NoError(t, coll.Indexes().DropOne(ctx, "a_1"))
		requireCode(t, coll.Indexes().DropOne(ctx, "a_1"), 27)
		requireCode(t, coll.Indexes().DropOne(ctx, "_id_"), 72)
		require.NoError(t, coll.Indexes().DropAll(ctx))
		specs, err = coll.Indexes().ListSpecifications(ctx)
		require.NoError(t, err)
		require.Len(t, specs, 1)
		err = env.DB.RunCommand(ctx, D("listIndexes", "missing")).Err()
		requireCode(t, err, 26)
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("a", 1), Options: options.Index().SetName("bc").SetUnique(true)})
		require.NoError(t, err)
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("z", 1), Options: options.Index().SetName("bc")})
		requireCode(t, err, 86)
	},
	"UniqueEnforced": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("i")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("email", 1), Options: options.Index().SetUnique(true)})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 1, "email", "a@x"))
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 2, "email", "a@x"))
		we := dupKey(t, err)
		require.True(t, strings.HasPrefix(we.Message, "E11000 duplicate key error collection: "+env.DB.Name()+".i index: email_1 dup key: { email: \"a@x\" }"), we.Message)
		var details struct {
			KeyPattern bson.D `bson:"keyPattern"`
			KeyValue   bson.D `bson:"keyValue"`
		}
		require.NoError(t, bson.Unmarshal(we.Raw, &details))
		requireJSON(t, `{"email":1}`, details.KeyPattern)
		requireJSON(t, `{"email":"a@x"}`, details.KeyValue)
		// duplicate _id
		_, err = coll.InsertOne(ctx, D("_id", 1, "email", "b@x"))
		we = dupKey(t, err)
		require.Contains(t, we.Message, "index: _id_ dup key: { _id: 1 }")
		// on update
		_, err = coll.InsertOne(ctx, D("_id", 3, "email", "c@x"))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 3), D("$set", D("email", "a@x")))
		dupKey(t, err)
		// on upsert
		_, err = coll.UpdateOne(ctx, D("_id", 4), D("$set", D("email", "a@x")), options.UpdateOne().SetUpsert(true))
		dupKey(t, err)
		// moving a key away frees it
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("email", "z@x")))
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, D("_id", 3), D("$set", D("email", "a@x")))
		require.NoError(t, err)
		// deleting frees it
		_, err = coll.DeleteOne(ctx, D("_id", 1))
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 5, "email", "z@x"))
		require.NoError(t, err)
		// missing fields count as null once
		_, err = coll.InsertOne(ctx, D("_id", 6))
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 7))
		dupKey(t, err)
		// numbers compare by value
		_, err = coll.InsertOne(ctx, D("_id", 8, "email", int32(1)))
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 9, "email", 1.0))
		dupKey(t, err)
		// building a unique index over duplicates fails
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("dup", 1), Options: options.Index().SetUnique(true)})
		requireCode(t, err, 11000)
	},
	"CompoundUnique": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("i")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("t", 1, "k", 1), Options: options.Index().SetUnique(true)})
		require.NoError(t, err)
		_, err = coll.InsertMany(ctx, []any{D("t", "a", "k", 1), D("t", "a", "k", 2), D("t", "b", "k", 1)})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("t", "a", "k", 1))
		we := dupKey(t, err)
		require.Contains(t, we.Message, "index: t_1_k_1 dup key: { t: \"a\", k: 1 }")
		// upserts keyed by the unique index
		for i := 0; i < 3; i++ {
			_, err = coll.UpdateOne(ctx, D("t", "c", "k", 9), D("$inc", D("n", 1)), options.UpdateOne().SetUpsert(true))
			require.NoError(t, err)
		}
		var got bson.M
		require.NoError(t, coll.FindOne(ctx, D("t", "c")).Decode(&got))
		require.EqualValues(t, 3, got["n"])
	},
	"SparseAndPartialUnique": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("i")
		_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
			{Keys: D("s", 1), Options: options.Index().SetUnique(true).SetSparse(true)},
			{Keys: D("p", 1), Options: options.Index().SetUnique(true).SetPartialFilterExpression(D("live", true))},
		})
		require.NoError(t, err)
		_, err = coll.InsertMany(ctx, []any{D("_id", 1), D("_id", 2), D("_id", 3, "p", 1), D("_id", 4, "p", 1, "live", true)})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, D("_id", 5, "p", 1, "live", true))
		dupKey(t, err)
	},
	"TTL": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("ttl")
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("at", 1), Options: options.Index().SetExpireAfterSeconds(0)})
		require.NoError(t, err)
		past := time.Now().Add(-time.Hour)
		_, err = coll.InsertMany(ctx, []any{
			D("_id", "old", "at", past),
			D("_id", "future", "at", time.Now().Add(time.Hour)),
			D("_id", "notdate", "at", "x"),
		})
		require.NoError(t, err)
		eventually(t, 150*time.Second, func() bool {
			n, err := coll.CountDocuments(ctx, D("_id", "old"))
			require.NoError(t, err)
			return n == 0
		}, "expired document removed")
		n, err := coll.CountDocuments(ctx, D())
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
	},
}
