package projection_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
)

// env is one test's servers: an embedded NATS with a topic, the Bus, the DLQ and a database.
type env struct {
	t     *testing.T
	url   string
	bus   *jetstream.Bus
	q     *dlq.Queue
	db    *mongo.Database
	topic string
	parts int

	mu      sync.Mutex
	futures []*jetstream.PublishFuture
	pubErr  error
}

func newEnv(t *testing.T, topic string, partitions int) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	e := &env{t: t, url: s.ClientURL(), topic: topic, parts: partitions}
	e.bus = embeddedtest.Bus(t, e.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: topic, Partitions: partitions}))
	q, err := dlq.Open(ctx, e.bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	e.q = q
	e.db = embeddedtest.Mongo(t)
	return e
}

// config is a projection of e's topic into collection "view", with short timeouts.
func (e *env) config(name string) projection.Config {
	return projection.Config{Name: name, Topic: e.topic, Database: e.db.Name(), Collection: "view",
		TTL: time.Second, AckTimeout: 5 * time.Second, WriteTimeout: 2 * time.Second, StopTimeout: 2 * time.Second}
}

func (e *env) publish(key string, payload any, opts ...jetbus.PublishOption) *jetbus.Event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, ok := payload.(string); ok {
		payload = json.RawMessage(s)
	}
	ev, err := e.bus.Publish(ctx, e.topic, payload, append([]jetbus.PublishOption{jetbus.WithKey(key)}, opts...)...)
	require.NoError(e.t, err)
	return ev
}

// runner runs a component until stop.
type runner struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (r *runner) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			panic("projection did not stop within 30s")
		}
	})
	return r.err
}

func start(t *testing.T, run func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	t.Cleanup(func() { _ = r.stop() })
	return r
}

func (e *env) changelog(cfg projection.Config, opts ...projection.Option) *projection.Changelog {
	e.t.Helper()
	c, err := projection.NewChangelog(cfg, e.bus, e.db.Client(), e.q, append([]projection.Option{projection.WithLogger(embeddedtest.Logger(e.t))}, opts...)...)
	require.NoError(e.t, err)
	return c
}

// docs returns the documents of collection by _id, without _ts.
func (e *env) docs(collection string) map[string]bson.M {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := e.db.Collection(collection).Find(ctx, bson.D{})
	require.NoError(e.t, err)
	var all []bson.M
	require.NoError(e.t, cur.All(ctx, &all))
	out := map[string]bson.M{}
	for _, d := range all {
		out[d["_id"].(string)] = d
	}
	return out
}

// waitLag waits until group has written and acknowledged everything of e's topic (every
// partition's consumer exists: a missing one counts no lag).
func (e *env) waitLag(group string, within time.Duration) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		c, err := e.bus.Cursor(context.Background(), e.topic, group)
		return err == nil && len(c.Partitions) == e.parts && c.Lag() == 0
	}, within, 20*time.Millisecond, "group %s did not catch up", group)
}

func (e *env) letters() []*dlq.Letter {
	e.t.Helper()
	ls, err := e.q.List(context.Background(), dlq.Filter{Topic: e.topic}, 0)
	require.NoError(e.t, err)
	return ls
}

// publishAsync publishes without waiting; flushAsync waits for all and fails the test on an
// error. Safe from any goroutine.
func (e *env) publishAsync(key, payload string) {
	f, err := e.bus.PublishAsync(context.Background(), e.topic, json.RawMessage(payload), jetbus.WithKey(key))
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.pubErr = err
		return
	}
	e.futures = append(e.futures, f)
	if len(e.futures) >= 1000 {
		fs := e.futures
		e.futures = nil
		for _, f := range fs {
			if _, err := f.Wait(context.Background()); err != nil {
				e.pubErr = err
			}
		}
	}
}

func (e *env) flushAsync() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.futures {
		if _, err := f.Wait(context.Background()); err != nil {
			e.pubErr = err
		}
	}
	e.futures = nil
}

func (e *env) requirePublished() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(e.t, e.pubErr)
}
