package changefeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// The Bus the package is used with has what it needs of one.
var _ changefeed.Publisher = (*jetstream.Bus)(nil)

// env is one test's servers: an embedded NATS with a Bus and a DLQ, and a MongoDB database.
type env struct {
	t    *testing.T
	nats *server.Server
	bus  *jetstream.Bus
	dlq  *dlq.Queue
	db   *mongo.Database
}

func newEnv(t *testing.T, topics ...string) *env {
	t.Helper()
	return newEnvOn(t, embeddedtest.Mongo(t), topics...)
}

// newEnvOn is newEnv on a given database (a test backend with a bounded oplog).
func newEnvOn(t *testing.T, db *mongo.Database, topics ...string) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	for _, tp := range topics {
		require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: tp, Partitions: 2}))
	}
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return &env{t: t, nats: s, bus: bus, dlq: q, db: db}
}

// start runs a feed until the test ends.
func (e *env) start(cfg changefeed.Config, opts ...changefeed.Option) *changefeed.Feed {
	e.t.Helper()
	if cfg.Database == "" && cfg.Collection != "" {
		cfg.Database = e.db.Name()
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Second
	}
	f, err := changefeed.New(e.t.Context(), e.bus, e.db.Client(), cfg,
		append([]changefeed.Option{changefeed.WithLogger(embeddedtest.Logger(e.t)), changefeed.WithDeadLetters(e.dlq)}, opts...)...)
	require.NoError(e.t, err)
	stoppers.Store(f, e.runComponent(f))
	return f
}

// stoppers holds the stop function of every component started by env.start.
var stoppers sync.Map

type component interface {
	Run(ctx context.Context) error
	Ready(ctx context.Context) error
}

// runComponent runs c until the test ends (or stop is called) and waits for it to return.
func (e *env) runComponent(c component) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	e.t.Cleanup(stop)
	return stop
}

// event is a message of a topic as stored.
type event struct {
	ID, Key, Op, NS string
	Payload         json.RawMessage
	Seq             uint64
}

// decoded unmarshals the payload.
func (ev event) decoded(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(ev.Payload, &m), "payload %s", ev.Payload)
	return m
}

// events reads every message of topic's stream, in stream order.
func (e *env) events(topic string) []event {
	e.t.Helper()
	return readStream(e.t, e.bus.JetStream(), jetbus.StreamName(topic))
}

func readStream(t *testing.T, js natsjs.JetStream, stream string) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		out = append(out, event{
			ID: m.Header.Get(jetbus.HeaderMsgID), Key: m.Header.Get(jetbus.HeaderKey),
			Op: m.Header.Get(changefeed.HeaderOp), NS: m.Header.Get(changefeed.HeaderNamespace),
			Payload: m.Data, Seq: seq,
		})
	}
	return out
}

// countNow is count for polled conditions (require.Eventually, Never): those run in
// goroutines that may outlive the test, so it touches no *testing.T and returns -1 when the
// stream cannot be read.
func (e *env) countNow(topic string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.bus.JetStream().Stream(ctx, jetbus.StreamName(topic))
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// count returns how many messages topic's stream holds.
func (e *env) count(topic string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.bus.JetStream().Stream(ctx, jetbus.StreamName(topic))
	require.NoError(e.t, err)
	info, err := s.Info(ctx)
	require.NoError(e.t, err)
	return int(info.State.Msgs)
}

// waitEvents waits until topic holds at least n messages and returns them.
func (e *env) waitEvents(topic string, n int) []event {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return e.countNow(topic) >= n }, 60*time.Second, 10*time.Millisecond,
		"want %d events in %s", n, topic)
	return e.events(topic)
}

// byKey groups events by key, in stream order.
func byKey(evs []event) map[string][]event {
	out := map[string][]event{}
	for _, ev := range evs {
		out[ev.Key] = append(out[ev.Key], ev)
	}
	return out
}

// waitActive waits until f reports itself active.
func waitRole(t *testing.T, f interface {
	Status(context.Context) (any, error)
}, role string) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := f.Status(t.Context())
		if err != nil {
			return false
		}
		switch s := st.(type) {
		case changefeed.Status:
			return s.Role == role
		case changefeed.OutboxStatus:
			return s.Role == role
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "role %s", role)
}

// savedPosition reads a feed's saved position from KV.
func savedPosition(t *testing.T, js natsjs.JetStream, feed string) *changefeed.Position {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), changefeed.PositionBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil
	}
	require.NoError(t, err)
	e, err := kv.Get(t.Context(), feed)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil
	}
	require.NoError(t, err)
	var p changefeed.Position
	require.NoError(t, json.Unmarshal(e.Value(), &p))
	return &p
}

// client connects a second MongoDB client to the deployment of db, with an app name (for
// fault injection scoped to it).
func mongoClient(t *testing.T, uri, app string) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName(app))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}
