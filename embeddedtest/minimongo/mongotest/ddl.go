package mongotest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func rename(t *testing.T, env Env, from, to string, dropTarget bool) error {
	t.Helper()
	cmd := D("renameCollection", env.DB.Name()+"."+from, "to", env.DB.Name()+"."+to)
	if dropTarget {
		cmd = append(cmd, bson.E{Key: "dropTarget", Value: true})
	}
	return env.DB.Client().Database("admin").RunCommand(ctxFor(t), cmd).Err()
}

func requireWriteErrorCode(t *testing.T, err error, code int) {
	t.Helper()
	var we mongo.WriteException
	require.ErrorAs(t, err, &we)
	require.Len(t, we.WriteErrors, 1)
	require.Equal(t, code, we.WriteErrors[0].Code, "%v", err)
}

// collOption returns one of the options listCollections reports for a collection, as
// relaxed extended JSON.
func collOption(t *testing.T, env Env, name, option string) string {
	t.Helper()
	specs, err := env.DB.ListCollectionSpecifications(ctxFor(t), D("name", name))
	require.NoError(t, err)
	require.Len(t, specs, 1)
	v, err := specs[0].Options.LookupErr(option)
	require.NoError(t, err, "option %s of %s", option, name)
	return v.String()
}

var ddlTests = map[string]func(t *testing.T, env Env){
	"RenameCollection": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		a := env.DB.Collection("a")
		_, err := a.InsertMany(ctx, []any{D("_id", 1, "k", "x"), D("_id", 2, "k", "y")})
		require.NoError(t, err)
		_, err = a.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: D("k", 1), Options: options.Index().SetUnique(true)})
		require.NoError(t, err)
		require.NoError(t, rename(t, env, "a", "b", false))
		names, err := env.DB.ListCollectionNames(ctx, D())
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, names)
		b := env.DB.Collection("b")
		requireJSON(t, `[{"_id":1,"k":"x"},{"_id":2,"k":"y"}]`, findAll(t, b, D(), options.Find().SetSort(D("_id", 1))))
		_, err = b.InsertOne(ctx, D("_id", 3, "k", "x"))
		require.True(t, mongo.IsDuplicateKeyError(err), "the unique index moved with the collection: %v", err)

		_, err = env.DB.Collection("c").InsertOne(ctx, D("_id", "c"))
		require.NoError(t, err)
		requireCode(t, rename(t, env, "b", "c", false), 48)
		require.NoError(t, rename(t, env, "b", "c", true))
		requireJSON(t, `[{"_id":1,"k":"x"},{"_id":2,"k":"y"}]`, findAll(t, env.DB.Collection("c"), D(), options.Find().SetSort(D("_id", 1))))
		requireCode(t, rename(t, env, "nosuch", "d", false), 26)
		requireCode(t, rename(t, env, "c", "c", false), 20)
		err = env.DB.RunCommand(ctx, D("renameCollection", env.DB.Name()+".c", "to", env.DB.Name()+".d")).Err()
		requireCode(t, err, 13) // only on the admin database
	},
	"RenameCollectionEvents": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		require.NoError(t, env.DB.CreateCollection(ctx, "src"))
		require.NoError(t, env.DB.CreateCollection(ctx, "dst"))
		src := watch(t, env.DB.Collection("src"), nil)
		dst := watch(t, env.DB.Collection("dst"), nil)
		dbs := watch(t, env.DB, nil)
		_, err := env.DB.Collection("src").InsertOne(ctx, D("_id", 1))
		require.NoError(t, err)
		require.NoError(t, rename(t, env, "src", "dst", true))
		_, err = env.DB.Collection("dst").InsertOne(ctx, D("_id", 2))
		require.NoError(t, err)

		requireRename := func(ev changeEvent) {
			t.Helper()
			require.Equal(t, "rename", ev.OperationType)
			require.Equal(t, "src", ev.NS.Coll)
			to, err := ev.raw.LookupErr("to")
			require.NoError(t, err)
			requireJSON(t, `{"db":"`+env.DB.Name()+`","coll":"dst"}`, to.Document())
		}
		require.Equal(t, "insert", next(t, src).OperationType)
		requireRename(next(t, src))
		require.Equal(t, "invalidate", next(t, src).OperationType)
		requireRename(next(t, dst))
		require.Equal(t, "invalidate", next(t, dst).OperationType)
		require.Equal(t, "insert", next(t, dbs).OperationType)
		requireRename(next(t, dbs))
		ev := next(t, dbs)
		require.Equal(t, "insert", ev.OperationType, "a database stream goes on after a rename")
		require.Equal(t, "dst", ev.NS.Coll)
	},
	"CollModPreAndPostImages": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("m")
		_, err := coll.InsertOne(ctx, D("_id", 1, "v", 1))
		require.NoError(t, err)
		require.NoError(t, env.DB.RunCommand(ctx, D("collMod", "m", "changeStreamPreAndPostImages", D("enabled", true))).Err())
		require.Equal(t, `{"enabled": true}`, collOption(t, env, "m", "changeStreamPreAndPostImages"))
		cs := watch(t, coll, nil, options.ChangeStream().SetFullDocumentBeforeChange(options.Required))
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("v", 2)))
		require.NoError(t, err)
		requireJSON(t, `{"_id":1,"v":1}`, next(t, cs).FullDocBefore)
		requireCode(t, env.DB.RunCommand(ctx, D("collMod", "nosuch", "changeStreamPreAndPostImages", D("enabled", true))).Err(), 26)
	},
	"CollModValidator": func(t *testing.T, env Env) {
		ctx := ctxFor(t)
		coll := env.DB.Collection("v")
		_, err := coll.InsertMany(ctx, []any{D("_id", 1, "qty", 5), D("_id", 2, "qty", -1)})
		require.NoError(t, err)
		validator := D("qty", D("$gte", 0))
		require.NoError(t, env.DB.RunCommand(ctx, D("collMod", "v", "validator", validator)).Err())
		require.Equal(t, `{"qty": {"$gte": {"$numberInt":"0"}}}`, collOption(t, env, "v", "validator"))

		_, err = coll.InsertOne(ctx, D("_id", 3, "qty", -5))
		requireWriteErrorCode(t, err, 121)
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("qty", -2)))
		requireWriteErrorCode(t, err, 121)
		_, err = coll.UpdateOne(ctx, D("_id", 2), D("$set", D("note", "x")))
		requireWriteErrorCode(t, err, 121) // strict: an invalid document stays unwritable
		_, err = coll.InsertOne(ctx, D("_id", 4, "qty", -5), options.InsertOne().SetBypassDocumentValidation(true))
		require.NoError(t, err)

		require.NoError(t, env.DB.RunCommand(ctx, D("collMod", "v", "validationLevel", "moderate")).Err())
		_, err = coll.UpdateOne(ctx, D("_id", 2), D("$set", D("note", "x")))
		require.NoError(t, err, "moderate: a document that was invalid may be updated")
		_, err = coll.UpdateOne(ctx, D("_id", 1), D("$set", D("qty", -2)))
		requireWriteErrorCode(t, err, 121)

		require.NoError(t, env.DB.RunCommand(ctx, D("collMod", "v", "validationAction", "warn")).Err())
		_, err = coll.InsertOne(ctx, D("_id", 5, "qty", -5))
		require.NoError(t, err, "warn: the write applies")
		require.Equal(t, int64(4), count(t, ctx, coll, D()))

		require.NoError(t, env.DB.CreateCollection(ctx, "created", options.CreateCollection().SetValidator(D("name", D("$type", "string")))))
		_, err = env.DB.Collection("created").InsertOne(ctx, D("name", 1))
		requireWriteErrorCode(t, err, 121)
	},
}
