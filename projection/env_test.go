package projection_test

import (
	"context"
	"encoding/json"
	"maps"
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
	futures []jetbus.PublishFuture
	pubErr  error
	last    map[int]uint64 // the highest sequence published to each partition
}

func newEnv(t *testing.T, topic string, partitions int) *env {
	t.Helper()
	s := embeddedtest.NATS(t)
	e := &env{t: t, url: s.ClientURL(), topic: topic, parts: partitions, last: map[int]uint64{}}
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
	e.mu.Lock()
	e.published(ev)
	e.mu.Unlock()
	return ev
}

// published records ev's position for waitLag. e.mu is held.
func (e *env) published(ev *jetbus.Event) {
	if ev != nil && ev.Seq > e.last[ev.Partition] {
		e.last[ev.Partition] = ev.Seq
	}
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
	c, err := projection.NewChangelog(e.bus, e.db.Client(), e.q, cfg, append([]projection.Option{projection.WithLogger(embeddedtest.Logger(e.t))}, opts...)...)
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

// waitLag waits until group has written and acknowledged everything e published: every
// partition's consumer exists, none has a lag, and each one's ack floor has reached the last
// event published to its partition. The lag alone is not enough: a consumer being created
// reports no pending events until the server has made it the consumer's leader.
func (e *env) waitLag(group string, within time.Duration) {
	e.t.Helper()
	e.mu.Lock()
	want := maps.Clone(e.last)
	e.mu.Unlock()
	start := time.Now()
	var last *jetbus.Cursor
	var err error
	ok := poll(within, 20*time.Millisecond, func() bool {
		last, err = e.bus.Cursor(context.Background(), e.topic, group)
		if err != nil || len(last.Partitions) != e.parts || last.Lag() != 0 {
			return false
		}
		for _, p := range last.Partitions {
			if p.AckFloor < want[p.Partition] {
				return false
			}
		}
		return true
	})
	// Logged (shown when the test fails) so a view found short can be told from a lag misread.
	if last != nil {
		e.t.Logf("group %s after %s: %+v", group, time.Since(start).Round(time.Millisecond), last.Partitions)
	}
	if !ok {
		e.logConsumers(group)
	}
	require.True(e.t, ok, "group %s did not catch up within %s (last error %v)", group, within, err)
}

// logConsumers logs the server's view of each of group's partition consumers, the group's
// checkpoints (a transactional projection's; 0 for others) and what the DLQ holds, so that a
// group found behind can be told apart: deliveries the server gave up on (MaxDeliver),
// acknowledgements it did not take, a consumer reset, or a checkpoint moved past what was
// acknowledged.
func (e *env) logConsumers(group string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := range e.parts {
		c, err := e.bus.JetStream().Consumer(ctx, jetbus.StreamName(e.topic), jetbus.ConsumerName(group, p))
		if err != nil {
			e.t.Logf("partition %d: %v", p, err)
			continue
		}
		i, err := c.Info(ctx)
		if err != nil {
			e.t.Logf("partition %d: %v", p, err)
			continue
		}
		e.mu.Lock()
		last := e.last[p]
		e.mu.Unlock()
		cp, cerr := projection.ReadCheckpoint(ctx, e.db, group, e.topic, p)
		e.t.Logf("partition %d: topic ends at %d; delivered %+v, ack floor %+v, ack pending %d, redelivered %d, pending %d, waiting %d, pin %+v, max deliver %d, ack wait %s; checkpoint %d (%v)",
			p, last, i.Delivered, i.AckFloor, i.NumAckPending, i.NumRedelivered, i.NumPending, i.NumWaiting, i.PriorityGroups, i.Config.MaxDeliver, i.Config.AckWait, cp, cerr)
	}
	ls, err := e.q.List(ctx, dlq.Filter{Topic: e.topic}, 0)
	e.t.Logf("DLQ: %d letters of %s (%v)", len(ls), e.topic, err)
}

// poll is embeddedtest.Poll.
var poll = embeddedtest.Poll

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
			ev, err := f.Wait(context.Background())
			if err != nil {
				e.pubErr = err
			}
			e.published(ev)
		}
	}
}

func (e *env) flushAsync() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.futures {
		ev, err := f.Wait(context.Background())
		if err != nil {
			e.pubErr = err
		}
		e.published(ev)
	}
	e.futures = nil
}

func (e *env) requirePublished() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(e.t, e.pubErr)
}
