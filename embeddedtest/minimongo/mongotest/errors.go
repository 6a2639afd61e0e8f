package mongotest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var errorTests = map[string]func(t *testing.T, env Env){
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
