package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
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
	"github.com/jetbus/jetbus/embeddedtest"
)

// TestMain: the test binary, re-executed by embeddedtest.ChildCommand, is the bridge.
func TestMain(m *testing.M) { embeddedtest.TestMain(m, main) }

// TestRunChangefeedProcess: `bridge run` as a process with a changefeed declared publishes a
// MongoDB insert into the feed's topic, and on SIGTERM stops the feed, saves its position
// past the insert, releases the lease and exits 0.
func TestRunChangefeedProcess(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	cfgFile := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`
mongo:
  database: shop
topics:
  - name: items
changefeeds:
  - name: items-cdc
    collection: items
    topic: items
shutdown:
  timeout: 20s
`), 0o644))
	p := embeddedtest.Start(t, "bridge", embeddedtest.ChildCommand("run", "--config", cfgFile,
		"--nats-url", s.ClientURL(), "--mongo-uri", uri, "--http-addr", "127.0.0.1:0"))
	var addr string
	require.True(t, p.Await(30*time.Second, func(out string) bool { addr = embeddedtest.LogAddr(out, "ops server listening"); return addr != "" }), "the bridge logs its ops address")
	get := func(path string) (int, []byte) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)

	nc := embeddedtest.Connect(t, s.ClientURL())
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(t.Context(), changefeed.PositionBucket)
	var pos changefeed.Position
	saved := func() bool {
		if kv == nil {
			if kv, err = js.KeyValue(t.Context(), changefeed.PositionBucket); err != nil {
				return false
			}
		}
		e, err := kv.Get(t.Context(), "items-cdc")
		return err == nil && json.Unmarshal(e.Value(), &pos) == nil
	}
	// start: latest saves its position at once; an insert after it is published.
	require.Eventually(t, saved, 30*time.Second, 20*time.Millisecond, "the feed saved its start position")
	before := string(pos.Token) // a copy: Unmarshal reuses the RawMessage

	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	_, err = client.Database("shop").Collection("items").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "i1"}, {Key: "qty", Value: 3}})
	require.NoError(t, err)

	st, err := js.Stream(t.Context(), jetbus.StreamName("items"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := st.Info(t.Context())
		return err == nil && info.State.Msgs == 1
	}, 30*time.Second, 20*time.Millisecond, "the insert is published")
	m, err := st.GetMsg(t.Context(), 1)
	require.NoError(t, err)
	assert.Equal(t, "i1", m.Header.Get(jetbus.HeaderKey))
	assert.Equal(t, "insert", m.Header.Get(changefeed.HeaderOp))
	assert.JSONEq(t, `{"_id":"i1","qty":3}`, string(m.Data))

	code, took := p.Stop(syscall.SIGTERM, 30*time.Second)
	assert.Equal(t, 0, code)
	assert.Less(t, took, 10*time.Second, "nothing to drain: well within shutdown.timeout")
	assert.Contains(t, p.Output().String(), `"msg":"stopped"`)
	assert.NotContains(t, p.Output().String(), "release failed")
	require.True(t, saved())
	assert.NotEqual(t, before, string(pos.Token), "the position saved on stop is past the insert")
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Msgs, "published once")
}
