package devenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/devenv"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

func TestDevEnvironment(t *testing.T) {
	env, err := devenv.Start(devenv.Config{Dir: t.TempDir(), NATSPort: -1, MongoAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer env.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	nc := embeddedtest.Connect(t, env.NATSURL())
	bus, err := jbjs.Open(ctx, nc)
	require.NoError(t, err)
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "dev.check"}))
	_, err = bus.Publish(ctx, "dev.check", map[string]string{"ok": "yes"})
	require.NoError(t, err)
	got := make(chan string, 1)
	sub, err := bus.Subscribe(ctx, "dev.check", "g", func(_ context.Context, d *jetbus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	defer sub.Stop()
	select {
	case p := <-got:
		require.JSONEq(t, `{"ok":"yes"}`, p)
	case <-ctx.Done():
		t.Fatal("no delivery")
	}

	mc, err := mongo.Connect(options.Client().ApplyURI(env.MongoURI()))
	require.NoError(t, err)
	defer mc.Disconnect(context.Background())
	_, err = mc.Database("dev").Collection("c").InsertOne(ctx, bson.M{"_id": 1})
	require.NoError(t, err)
	n, err := mc.Database("dev").Collection("c").CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
