package wiring_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/wiring"
	"github.com/jetbus/jetbus/schema"
)

// TestBridgeOpensSharedThingsOnce runs a bridge with schemas, ingress, a changefeed and an
// outbox, and counts on the NATS server what it holds open: one schema registry (a registry
// watches its bucket through one consumer of the bucket's stream) however many components
// validate publishes.
func TestBridgeOpensSharedThingsOnce(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "schemas", "orders"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schemas", "orders", "v1.json"), []byte(`{"type": "object"}`), 0o644))
	bridge := start(t, wiring.Bridge, dir, `
schemas: schemas
topics: [{name: orders}, {name: items}]
ingress: {allow: [orders]}
changefeeds: [{name: items-cdc, collection: items, topic: items}]
outbox: [{name: ob, collection: outbox}]
`, "JETBUS_NATS_URLS="+s.ClientURL(), "JETBUS_MONGO_URI="+uri)
	ctx := context.Background()

	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	st, err := js.Stream(ctx, "KV_"+schema.DefaultBucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, info.State.Consumers, "one schema registry watches the bucket")

	require.NoError(t, bridge.stop())
	// Everything it opened is closed: no consumer of the bucket is left.
	require.True(t, embeddedtest.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Consumers == 0
	}), "the registry's watcher is gone")
}
