package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/bustest"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

func TestConformanceSingleNode(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return embeddedtest.Bus(t, s.ClientURL()) },
		CreateTopic: func(t *testing.T, topic string, partitions int) {
			require.NoError(t, admin.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: topic, Partitions: partitions}))
		},
	})
}

// TestConformanceKeyed runs the suite on keyed topics (every event stored under its key's
// subject, all versions kept): everything that works on plain topics works on keyed ones.
func TestConformanceKeyed(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return embeddedtest.Bus(t, s.ClientURL()) },
		CreateTopic: func(t *testing.T, topic string, partitions int) {
			require.NoError(t, admin.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: topic, Partitions: partitions, Keyed: true}))
		},
	})
}

// TestConformanceUnordered runs the suite on unordered groups (jetbus.Unordered): everything
// but order per key holds, and two clients of a group share a partition.
func TestConformanceUnordered(t *testing.T) {
	s := embeddedtest.NATS(t)
	admin := embeddedtest.Bus(t, s.ClientURL())
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return embeddedtest.Bus(t, s.ClientURL()) },
		CreateTopic: func(t *testing.T, topic string, partitions int) {
			require.NoError(t, admin.EnsureTopic(context.Background(), jbjs.TopicConfig{Name: topic, Partitions: partitions}))
		},
		Unordered: true,
	})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster conformance runs without -short")
	}
	c := embeddedtest.Cluster(t, 3)
	admin := embeddedtest.Bus(t, c.URLs())
	var lastTopic string
	stopped := -1
	bustest.Run(t, bustest.Harness{
		NewBus: func(t *testing.T) jetbus.Bus { return embeddedtest.Bus(t, c.URLs()) },
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
