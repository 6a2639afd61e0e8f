package process

import (
	"context"
	"log/slog"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// TopicConfig maps a declared topic to the Bus's TopicConfig.
func TopicConfig(t config.Topic) (jetstream.TopicConfig, error) {
	storage := natsjs.FileStorage
	if t.Storage == "memory" {
		storage = natsjs.MemoryStorage
	}
	return jetstream.TopicConfig{
		Name: t.Name, Partitions: t.Partitions, Replicas: t.Replicas, MaxAge: t.MaxAge,
		MaxBytes: int64(t.MaxBytes), Storage: storage, DuplicateWindow: t.DuplicateWindow,
		Keyed: t.Keyed, KeepPerKey: t.KeepPerKey,
	}, nil
}

// EnsureTopics creates or updates every declared topic.
func EnsureTopics(ctx context.Context, bus *jetstream.Bus, topics []config.Topic, log *slog.Logger) error {
	for _, t := range topics {
		tc, err := TopicConfig(t)
		if err != nil {
			return err
		}
		if err := bus.EnsureTopic(ctx, tc); err != nil {
			return err
		}
		log.Info("topic ensured", "topic", t.Name, "partitions", tc.Partitions, "replicas", tc.Replicas)
	}
	return nil
}

// PushSchemas registers the schema files of dir, idempotently.
func PushSchemas(ctx context.Context, js schema.JetStream, dir string, log *slog.Logger) error {
	reg, err := schema.Open(ctx, js)
	if err != nil {
		return err
	}
	defer reg.Close()
	pushed, err := schema.PushDir(ctx, reg, dir)
	for _, p := range pushed {
		log.Info("schema", "topic", p.Topic, "version", p.Version, "registered", p.Created)
	}
	return err
}

// DLQConfig maps the dlq section to the Queue's Config.
func DLQConfig(c config.DLQ) dlq.Config {
	return dlq.Config{Replicas: c.Replicas, MaxAge: c.MaxAge, Parking: c.Parking}
}

// Sweeper is the DLQ safety net as a component: it moves deliveries the server gave up on
// into the DLQ every interval.
func Sweeper(q *dlq.Queue, every time.Duration) Component {
	return Func("dlq-sweeper", func(ctx context.Context) error { return q.RunSweeper(ctx, every) })
}
