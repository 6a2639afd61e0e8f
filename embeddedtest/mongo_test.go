package embeddedtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/embeddedtest/minimongo/mongotest"
)

// TestMongoConformance runs the MongoDB conformance suite through the helpers tests use:
// against the in-process backend, or against JETBUS_TEST_MONGO_URI when it is set.
func TestMongoConformance(t *testing.T) {
	mongotest.Run(t, func(t *testing.T) mongotest.Env {
		return mongotest.Env{DB: embeddedtest.Mongo(t), URI: embeddedtest.MongoURI(t)}
	})
}

func TestMongoDatabasePerTest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := embeddedtest.Mongo(t)
	b := embeddedtest.Mongo(t)
	require.NotEqual(t, a.Name(), b.Name())
	require.Equal(t, embeddedtest.MongoURI(t), embeddedtest.MongoURI(t))
	_, err := a.Collection("c").InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
	require.NoError(t, err)
	n, err := b.Collection("c").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestMongoExternalURI exercises the JETBUS_TEST_MONGO_URI path with a deployment the test
// starts itself: the helpers connect to it and drop the test's database afterwards.
func TestMongoExternalURI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := minimongo.Start(minimongo.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	t.Setenv(embeddedtest.MongoURIEnv, s.URI())
	var name string
	t.Run("uses", func(t *testing.T) {
		require.Equal(t, s.URI(), embeddedtest.MongoURI(t))
		db := embeddedtest.Mongo(t)
		name = db.Name()
		_, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
		require.NoError(t, err)
	})
	db := embeddedtest.Mongo(t)
	names, err := db.Client().ListDatabaseNames(ctx, bson.D{{Key: "name", Value: name}})
	require.NoError(t, err)
	require.Empty(t, names, "the test database is dropped at cleanup")
}
