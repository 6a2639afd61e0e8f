package partition

import (
	"context"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// KV is what reading a group's state needs of a JetStream context (WatchMembers, Status):
// its KV buckets and the streams behind them. natsjs.JetStream has it.
type KV interface {
	KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error)
	Stream(ctx context.Context, name string) (natsjs.Stream, error)
}

// JetStream is what a member of a group needs of a JetStream context (OpenGroup, Subscribe):
// KV, creating the group's buckets, reading a partition consumer's state before taking the
// partition over, and the connection, to notice it closing. natsjs.JetStream has it.
type JetStream interface {
	KV
	CreateKeyValue(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error)
	Consumer(ctx context.Context, stream, consumer string) (natsjs.Consumer, error)
	Conn() *nats.Conn
}

var (
	_ JetStream = natsjs.JetStream(nil)
	_ KV        = natsjs.JetStream(nil)
)
