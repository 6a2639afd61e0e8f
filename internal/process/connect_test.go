package process_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
)

// TestConnectNATSInboxPrefix: nats.inbox_prefix is where the connection's replies come,
// JetStream's included (the subject a NATS permission lets the process subscribe to).
func TestConnectNATSInboxPrefix(t *testing.T) {
	s := embeddedtest.NATS(t)
	nc, err := process.ConnectNATS(config.NATS{URLs: []string{s.ClientURL()}, InboxPrefix: "_INBOX_bridge"}, "test", false)
	require.NoError(t, err)
	defer nc.Close()
	assert.True(t, strings.HasPrefix(nc.NewInbox(), "_INBOX_bridge."), nc.NewInbox())

	// Watch what the server sees: the JetStream API request's reply subject.
	spy := embeddedtest.Connect(t, s.ClientURL())
	sub, err := spy.SubscribeSync("$JS.API.INFO")
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	require.NoError(t, err)
	m, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(m.Reply, "_INBOX_bridge."), "JetStream replies to %s", m.Reply)
}
