package minimongo_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/embeddedtest/minimongo/mongotest"
)

var dbSeq atomic.Int64

// startServer starts a backend for t and a client connected to it.
func startServer(t testing.TB, opts minimongo.Options) (*minimongo.Server, *mongo.Client) {
	t.Helper()
	s, err := minimongo.Start(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return s, c
}

// TestConformance runs the conformance suite against one shared backend, as many test
// packages would use it concurrently.
func TestConformance(t *testing.T) {
	s, c := startServer(t, minimongo.Options{TTLInterval: 50 * time.Millisecond})
	mongotest.Run(t, func(t *testing.T) mongotest.Env {
		return mongotest.Env{DB: c.Database(fmt.Sprintf("conf%d", dbSeq.Add(1))), URI: s.URI()}
	})
}
