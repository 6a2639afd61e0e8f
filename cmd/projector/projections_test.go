package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// deployment is an embedded NATS, the MongoDB test backend and a configuration file with one
// projection of topic orders into collection orders.
type deployment struct {
	config string
	addr   string
	db     *mongo.Database
	bus    *jetstream.Bus
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(fmt.Sprintf("projector%d", time.Now().UnixNano()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	yaml := fmt.Sprintf(`nats: {urls: [%s]}
mongo: {uri: "%s", database: %s}
http: {addr: "%s"}
shutdown: {timeout: 10s}
topics:
  - {name: orders, partitions: 2}
projections:
  - name: orders-view
    topic: orders
    collection: orders
    indexes: [{fields: [status]}]
`, s.ClientURL(), uri, db.Name(), addr)
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	d := &deployment{config: file, addr: addr, db: db, bus: embeddedtest.Bus(t, s.ClientURL())}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, d.bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders", Partitions: 2}))
	return d
}

func (d *deployment) publish(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		_, err := d.bus.Publish(context.Background(), "orders", map[string]any{"status": "new", "n": i}, jetbus.WithKey(fmt.Sprintf("o%d", i%10)))
		require.NoError(t, err)
	}
}

func (d *deployment) count(t *testing.T, collection string) int64 {
	n, err := d.db.Collection(collection).CountDocuments(context.Background(), bson.D{})
	require.NoError(t, err)
	return n
}

func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRunProjects: `projector run` runs the declared projection: the view fills, its metrics
// and status are served, and SIGTERM (the context) stops it cleanly.
func TestRunProjects(t *testing.T) {
	d := newDeployment(t)
	d.publish(t, 50)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", d.config}, io.Discard, io.Discard) }()
	require.Eventually(t, func() bool { return d.count(t, "orders") == 10 }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(get("http://"+d.addr+"/metrics"), `projection_events_total{outcome="written",projection="orders-view"}`)
	}, 10*time.Second, 20*time.Millisecond)
	status := get("http://" + d.addr + "/v1/ops/status")
	assert.Contains(t, status, `"projection/orders-view"`)
	assert.Contains(t, status, `"owned"`)
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code)
	case <-time.After(20 * time.Second):
		t.Fatal("projector run did not stop")
	}
}

// TestRebuildCommand: `projector rebuild NAME` builds the next generation, reports progress on
// stderr and where the view lives now on stdout.
func TestRebuildCommand(t *testing.T) {
	d := newDeployment(t)
	d.publish(t, 100)
	code, out, errOut := runArgs(t, "rebuild", "--config", d.config, "--handover", "100ms", "--grace", "100ms", "orders-view")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "rebuilt orders-view: generation 1, collection orders-g1, group orders-view-g1")
	assert.Contains(t, errOut, "rebuild orders-view: 100/100 (0 failed)")
	assert.Equal(t, int64(10), d.count(t, "orders-g1"))

	code, out, errOut = runArgs(t, "rebuild", "--config", d.config, "--handover", "100ms", "--grace", "100ms", "orders-view")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "generation 2, collection orders-g2")
	names, err := d.db.ListCollectionNames(context.Background(), bson.D{})
	require.NoError(t, err)
	assert.NotContains(t, names, "orders-g1", "the previous generation is removed")
}
