package wiring_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
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
	file := filepath.Join(dir, "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
schemas: schemas
topics: [{name: orders}, {name: items}]
ingress: {allow: [orders]}
changefeeds: [{name: items-cdc, collection: items, topic: items}]
outbox: [{name: ob, collection: outbox}]
`), 0o644))
	cfg, err := config.Load(config.Options{File: file, Environ: []string{
		"JETBUS_NATS_URLS=" + s.ClientURL(), "JETBUS_MONGO_URI=" + uri, "JETBUS_HTTP_ADDR=127.0.0.1:0"}})
	require.NoError(t, err)
	spec, err := wiring.Bridge(cfg)
	require.NoError(t, err)
	spec.Config, spec.Logger = cfg, embeddedtest.Logger(t)
	addr := make(chan string, 1)
	spec.Listening = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- process.Run(ctx, spec) }()
	base := "http://" + <-addr
	require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}), "the bridge is ready")

	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	st, err := js.Stream(ctx, "KV_"+schema.DefaultBucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, info.State.Consumers, "one schema registry watches the bucket")

	cancel()
	require.NoError(t, <-done)
	// Everything it opened is closed: no consumer of the bucket is left.
	require.True(t, embeddedtest.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Consumers == 0
	}), "the registry's watcher is gone")
}
