package devenv_test

import (
	"context"
	"os"
	"path/filepath"
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

// TestDataSurvivesRestart: what the environment stored under its Dir — the MongoDB backend's
// documents and JetStream's streams — is there again when it starts on the same Dir.
func TestDataSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() (*devenv.Env, *mongo.Collection, *jbjs.Bus) {
		env, err := devenv.Start(devenv.Config{Dir: dir, NATSPort: -1, MongoAddr: "127.0.0.1:0"})
		require.NoError(t, err)
		mc, err := mongo.Connect(options.Client().ApplyURI(env.MongoURI()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
		bus, err := jbjs.Open(ctx, embeddedtest.Connect(t, env.NATSURL()))
		require.NoError(t, err)
		return env, mc.Database("dev").Collection("orders"), bus
	}

	env, orders, bus := start()
	_, err := orders.InsertOne(ctx, bson.M{"_id": "o1", "qty": 3})
	require.NoError(t, err)
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "dev.orders"}))
	ev, err := bus.Publish(ctx, "dev.orders", map[string]int{"qty": 3})
	require.NoError(t, err)
	require.NoError(t, env.Close())
	require.FileExists(t, filepath.Join(dir, "mongo", "state.bson"))

	env, orders, bus = start()
	defer env.Close()
	var got bson.M
	require.NoError(t, orders.FindOne(ctx, bson.M{"_id": "o1"}).Decode(&got))
	require.EqualValues(t, 3, got["qty"])
	info, err := bus.JetStream().Stream(ctx, jetbus.StreamName("dev.orders"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.CachedInfo().State.Msgs)
	require.NotEmpty(t, ev.ID)
}

// TestDamagedMongoState: a damaged state file stops the start with an error naming it, and
// leaves it in place.
func TestDamagedMongoState(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "mongo", "state.bson")
	require.NoError(t, os.MkdirAll(filepath.Dir(state), 0o755))
	require.NoError(t, os.WriteFile(state, []byte("not a state file"), 0o644))
	env, err := devenv.Start(devenv.Config{Dir: dir, NATSPort: -1, MongoAddr: "127.0.0.1:0"})
	require.Nil(t, env)
	require.ErrorContains(t, err, state)
	require.ErrorContains(t, err, "corrupt")
	require.NotContains(t, err.Error(), "free?")
	data, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Equal(t, "not a state file", string(data))
}
