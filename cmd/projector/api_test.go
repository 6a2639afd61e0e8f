package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestRunServesSnapshotAPI: projector run serves the declared views and keyed topics on
// http.api_addr, with the configured tokens, until it is stopped.
func TestRunServesSnapshotAPI(t *testing.T) {
	url := embeddedtest.NATS(t).ClientURL()
	db := embeddedtest.Mongo(t)
	_, err := db.Collection("orders").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "o1"}, {Key: "_v", Value: int64(3)},
		{Key: "_ts", Value: bson.NewDateTimeFromTime(time.Now())}, {Key: "status", Value: "paid"}})
	require.NoError(t, err)
	apiAddr := freeAddr(t)
	cfgFile := t.TempDir() + "/jetbus.yaml"
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
mongo: {database: %s}
http: {api_addr: "%s", topics: [customers]}
topics:
  - {name: orders, partitions: 2}
  - {name: customers, partitions: 2, keyed: true}
projections:
  - {name: orders-view, topic: orders, collection: orders}
views:
  - {name: orders, projection: orders-view, filters: {status: string}, scan: true}
auth:
  tokens:
    - {name: app, token: secret-token-0123456789, views: [orders, "topic:customers"]}
`, db.Name(), apiAddr)), 0o644))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", cfgFile, "--nats-url", url, "--mongo-uri", embeddedtest.MongoURI(t),
			"--http-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	get := func(path, token string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, "http://"+apiAddr+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		return res.StatusCode, m
	}
	require.Eventually(t, func() bool { code, _ := get("/v1/views/orders/o1", "secret-token-0123456789"); return code == 200 },
		20*time.Second, 20*time.Millisecond, "the API answers")

	code, m := get("/v1/views/orders/o1", "secret-token-0123456789")
	assert.Equal(t, 200, code)
	assert.Equal(t, "paid", m["status"])
	code, _ = get("/v1/views/orders/o1", "")
	assert.Equal(t, 401, code)
	code, m = get("/v1/views/orders?status=eq.paid", "secret-token-0123456789")
	assert.Equal(t, 200, code)
	assert.Len(t, m["items"], 1)

	bus := embeddedtest.Bus(t, url)
	_, err = bus.Publish(t.Context(), "customers", map[string]string{"name": "Ada"}, jetbus.WithKey("c1"))
	require.NoError(t, err)
	code, m = get("/v1/topics/customers/keys/c1", "secret-token-0123456789")
	assert.Equal(t, 200, code, "%v", m)
	assert.Equal(t, map[string]any{"name": "Ada"}, m["payload"])
	code, _ = get("/openapi.json", "")
	assert.Equal(t, 200, code)

	cancel()
	select {
	case c := <-done:
		assert.Equal(t, 0, c, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("projector run did not stop")
	}
	code, _ = get("/v1/views/orders/o1", "secret-token-0123456789")
	assert.Equal(t, 0, code, "the listener is closed")
}

func TestAPIConfigErrors(t *testing.T) {
	bad := t.TempDir() + "/bad.yaml"
	require.NoError(t, os.WriteFile(bad, []byte(`
topics: [{name: plain}]
http: {topics: [plain, nope]}
`), 0o644))
	code, _, errOut := runArgs(t, "run", "--config", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `http.topics[0]: topic "plain" is not keyed`)
	assert.Contains(t, errOut, `http.topics[1]: topic "nope" is not declared in topics`)
}
