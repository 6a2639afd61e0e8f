package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
)

// TestRunChangefeedsAndOutbox: `bridge run` with a changefeed and an outbox declared publishes
// a collection's changes (validated by the topic's schema; a change the schema refuses is
// dead-lettered) and the outbox's events, reports the feed in /readyz and /v1/ops/status,
// and releases the leases on shutdown.
func TestRunChangefeedsAndOutbox(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "schemas", "customers"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schemas", "customers", "v1.json"),
		[]byte(`{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`), 0o644))
	cfgFile := filepath.Join(dir, "jetbus.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`
mongo:
  database: shop
topics:
  - name: customers
    partitions: 2
  - name: orders
schemas: schemas
changefeeds:
  - name: customers-cdc
    collection: customers
    topic: customers
    start: copy_existing
    pipeline:
      - $match: {operationType: {$in: [insert, update, replace, delete]}}
outbox:
  - name: shop-outbox
    collection: outbox
shutdown:
  timeout: 20s
`), 0o644))
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	shop := client.Database("shop")
	_, err = shop.Collection("customers").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "c1"}, {Key: "name", Value: "Ada"}})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr embeddedtest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"run", "--config", cfgFile, "--nats-url", s.ClientURL(), "--mongo-uri", uri, "--http-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	var addr string
	require.Eventually(t, func() bool { addr = embeddedtest.LogAddr(stderr.String(), "ops server listening"); return addr != "" }, 30*time.Second, 10*time.Millisecond)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond, "ready\n%s", stderr.String())

	// Ready comes before the copy ends; a document written during the copy is published
	// both copied and as its change. The changes below must be streamed only.
	phase := func() string {
		_, body := get("/v1/ops/status")
		var st ops.Status
		if json.Unmarshal([]byte(body), &st) != nil {
			return ""
		}
		for _, c := range st.Components {
			if d, ok := c.Detail.(map[string]any); ok && c.Name == "changefeed/customers-cdc" {
				if p, ok := d["position"].(map[string]any); ok {
					s, _ := p["phase"].(string)
					return s
				}
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return phase() == "stream" }, 30*time.Second, 20*time.Millisecond, "the copy ends")

	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	_, err = shop.Collection("customers").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "c2"}, {Key: "name", Value: 7}})
	require.NoError(t, err)
	_, err = shop.Collection("customers").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "c3"}, {Key: "name", Value: "Grace"}})
	require.NoError(t, err)
	ev, err := changefeed.AppendOutbox(t.Context(), shop.Collection("outbox"), "orders", map[string]any{"id": 1}, jetbus.WithKey("o1"))
	require.NoError(t, err)

	keys := func(topic string) []string {
		st, err := js.Stream(t.Context(), jetbus.StreamName(topic))
		require.NoError(t, err)
		info, err := st.Info(t.Context())
		require.NoError(t, err)
		var out []string
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(t.Context(), seq)
			require.NoError(t, err)
			out = append(out, m.Header.Get(jetbus.HeaderKey)+"|"+m.Header.Get(jetbus.HeaderSchemaVersion))
		}
		return out
	}
	require.Eventually(t, func() bool { return len(keys("customers")) == 2 && len(keys("orders")) == 1 }, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, []string{"c1|1", "c3|1"}, keys("customers"), "copied, then streamed; validated and stamped")
	q, err := dlq.Open(t.Context(), js, dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	ls, err := q.List(t.Context(), dlq.Filter{Group: "changefeed-customers-cdc"}, 0)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, "c2", ls[0].Key)
	assert.Equal(t, dlq.ReasonChangefeed, ls[0].Reason)

	code, body := get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "[+]components ok")
	// The status is computed at most once a second: read it until it shows the outbox's event.
	found := map[string]map[string]any{}
	require.Eventually(t, func() bool {
		code, body = get("/v1/ops/status")
		require.Equal(t, http.StatusOK, code, body)
		var st ops.Status
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		for _, c := range st.Components {
			if d, ok := c.Detail.(map[string]any); ok {
				found[c.Name] = d
			}
		}
		published, _ := found["outbox/shop-outbox"]["published"].(float64)
		return published >= 1
	}, 10*time.Second, 50*time.Millisecond, "the status shows the outbox's event")
	require.Contains(t, found, "changefeed/customers-cdc")
	require.Contains(t, found, "outbox/shop-outbox")
	feed := found["changefeed/customers-cdc"]
	assert.Equal(t, "active", feed["role"])
	assert.Equal(t, "stream", feed["position"].(map[string]any)["phase"], "the feed's position")
	assert.EqualValues(t, 1, found["outbox/shop-outbox"]["published"], "event %s", ev.ID)
	_, metrics := get("/metrics")
	assert.Contains(t, metrics, `changefeed_changes_published_total{feed="customers-cdc"} 2`)
	assert.Contains(t, metrics, `changefeed_copy_progress_ratio{feed="customers-cdc"} 1`)

	cancel()
	select {
	case code := <-exited:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("bridge did not stop")
	}
	assert.Contains(t, stderr.String(), `"component":"changefeed/customers-cdc"`)
	assert.NotContains(t, stderr.String(), "release failed")
}
