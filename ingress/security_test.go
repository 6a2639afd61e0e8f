package ingress_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestUntrustedClientsPublishOnlyThroughIngress: the server is configured as README's
// "Ingress" section says: the bridge's user may do anything, an application's user may only
// publish to in.> and receive replies on its own inbox prefix. Such a client gets its events
// stored through ingress, and cannot write a stream, call the JetStream API, write the DLQ or
// KV, read ingress's subject or anyone's replies, or make ingress publish where it chooses.
func TestUntrustedClientsPublishOnlyThroughIngress(t *testing.T) {
	opts := embeddedtest.ServerOptions(t.TempDir())
	opts.Users = []*server.User{
		{Username: "bridge", Password: "bridge-secret"},
		{Username: "app", Password: "app-secret", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"in.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_app.>"}},
		}},
	}
	s, err := embeddedtest.StartServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	port := s.Addr().String()[strings.LastIndexByte(s.Addr().String(), ':')+1:]
	bridgeURL := fmt.Sprintf("nats://bridge:bridge-secret@127.0.0.1:%s", port)
	e := newEnvOn(t, s, bridgeURL, jbjs.TopicConfig{Name: "orders"})
	e.run(ingress.Config{Allow: []string{"orders"}})

	var mu sync.Mutex
	var violations []string
	app := client(t, fmt.Sprintf("nats://127.0.0.1:%s", port), nats.UserInfo("app", "app-secret"),
		nats.CustomInboxPrefix("_INBOX_app"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err.Error())
			mu.Unlock()
		}))
	refused := func(t *testing.T, what string) {
		t.Helper()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, v := range violations {
				if strings.Contains(v, "Permissions Violation") && strings.Contains(v, what) {
					return true
				}
			}
			return false
		}, wait, 5*time.Millisecond, "the server refuses %s", what)
	}

	r := decodeOK(t, request(t, app, "in.orders", []byte(`{"n":1}`), "x-key", "k"))
	assert.Equal(t, uint64(1), r.Seq, "stored through ingress")

	t.Run("publish to a stream", func(t *testing.T) {
		require.NoError(t, app.Publish(jetbus.PartitionSubject("orders", 0), []byte(`{"n":2}`)))
		require.NoError(t, app.Flush())
		refused(t, `Publish to "orders.p0"`)
	})
	t.Run("JetStream API", func(t *testing.T) {
		_, err := app.Request("$JS.API.STREAM.DELETE."+jetbus.StreamName("orders"), nil, 200*time.Millisecond)
		require.Error(t, err)
		refused(t, `Publish to "$JS.API.STREAM.DELETE.orders"`)
	})
	t.Run("DLQ and KV", func(t *testing.T) {
		require.NoError(t, app.Publish("dlq.orders", []byte(`{}`)))
		require.NoError(t, app.Publish("$KV.jetbus_dlq_replays.x", []byte(`billing`)))
		require.NoError(t, app.Flush())
		refused(t, `Publish to "dlq.orders"`)
		refused(t, `Publish to "$KV.jetbus_dlq_replays.x"`)
	})
	t.Run("read ingress's subject or others' replies", func(t *testing.T) {
		for _, subj := range []string{"in.>", "_INBOX.>", "orders.>"} {
			_, err := app.QueueSubscribe(subj, ingress.QueueGroup, func(*nats.Msg) {})
			require.NoError(t, err) // refused asynchronously
		}
		require.NoError(t, app.Flush())
		refused(t, `Subscription to "in.>"`)
		refused(t, `Subscription to "_INBOX.>"`)
		refused(t, `Subscription to "orders.>"`)
	})
	t.Run("a reply subject that is not an inbox", func(t *testing.T) {
		// The client asks ingress to "reply" into the stream: refused and dead-lettered.
		require.NoError(t, app.PublishMsg(&nats.Msg{Subject: "in.orders", Reply: "orders.p0", Data: []byte(`{"n":3}`)}))
		require.NoError(t, app.PublishMsg(&nats.Msg{Subject: "in.orders", Reply: "$JS.API.STREAM.DELETE.orders", Data: []byte(`{"n":4}`)}))
		require.NoError(t, app.Flush())
		require.Eventually(t, func() bool { return e.dlqCount() == 2 }, wait, 5*time.Millisecond)
	})
	// Nothing but the one event came in; the stream is still there.
	info, err := e.js.Stream(context.Background(), jetbus.StreamName("orders"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.CachedInfo().State.Msgs)
}
