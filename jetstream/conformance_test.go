package jetstream_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/bustest"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// testLogger routes the Bus's logs to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func openBus(t testing.TB, url string, opts ...jbjs.Option) *jbjs.Bus {
	t.Helper()
	nc := embeddedtest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := jbjs.Open(ctx, nc, append([]jbjs.Option{jbjs.WithLogger(testLogger(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformanceSingleNode(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := openBus(t, s.ClientURL())
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return openBus(t, s.ClientURL()) },
		CreateTopic: func(t *testing.T, topic string, partitions int) {
			require.NoError(t, admin.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: topic, Partitions: partitions}))
		},
	})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster conformance runs without -short")
	}
	c := embeddedtest.Cluster(t, 3)
	admin := openBus(t, c.URLs())
	var lastTopic string
	stopped := -1
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return openBus(t, c.URLs()) },
		CreateTopic: func(t *testing.T, topic string, partitions int) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: topic, Partitions: partitions, Replicas: 3}))
			lastTopic = topic
		},
		Disrupt: func(t *testing.T) {
			leader := c.StreamLeader("$G", jetbus.StreamName(lastTopic))
			require.GreaterOrEqual(t, leader, 0, "stream has a leader")
			stopped = (leader + 1) % 3
			c.Stop(stopped)
		},
		Restore: func(t *testing.T) { c.Restart(stopped) },
		Timeout: 30 * time.Second,
	})
}
