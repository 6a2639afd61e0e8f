package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// body is what every side publishes: the same 70-byte JSON document as jetstream's benchmarks.
var body = json.RawMessage(`{"order":12345,"customer":"c-987","amount":42.5,"items":["a","b","c"]}`)

// asyncMaxPending bounds outstanding async publishes on every side: the Bus's default.
const asyncMaxPending = 4000

// env is the embedded server and an admin connection for creating streams, filling them
// and reading consumer state. Sides open their own connections.
type env struct {
	srv   *server.Server
	dir   string
	admin *nats.Conn
	bus   *jetstream.Bus   // admin Bus: creates topics, fills the Bus's streams
	js    natsjs.JetStream // admin JetStream: purges, fills raw streams, reads consumer state
	seq   atomic.Int64     // makes group and durable names unique within the run
}

// startEnv starts one nats-server with JetStream on file storage in a temporary directory.
func startEnv(ctx context.Context) (*env, error) {
	dir, err := os.MkdirTemp("", "jetbus-peers-")
	if err != nil {
		return nil, err
	}
	srv, err := embeddedtest.StartServer(embeddedtest.ServerOptions(dir))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &env{srv: srv, dir: dir}
	if e.admin, err = e.connect(); err != nil {
		e.close()
		return nil, err
	}
	if e.bus, err = jetstream.Open(ctx, e.admin); err != nil {
		e.close()
		return nil, err
	}
	if e.js, err = natsjs.New(e.admin, natsjs.WithPublishAsyncMaxPending(asyncMaxPending)); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.bus != nil {
		_ = e.bus.Close()
	}
	if e.admin != nil {
		e.admin.Close()
	}
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	os.RemoveAll(e.dir)
}

// connect opens a new connection to the server.
func (e *env) connect() (*nats.Conn, error) {
	return nats.Connect(e.srv.ClientURL(), nats.Name("jetbus-peers"))
}

// name returns prefix followed by a number unique within the run.
func (e *env) name(prefix string) string {
	return prefix + strconv.FormatInt(e.seq.Add(1), 10)
}

// ensureTopic creates a jetbus topic: every side's stream is one, so only clients differ.
func (e *env) ensureTopic(ctx context.Context, topic string, partitions int) error {
	return e.bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: topic, Partitions: partitions})
}

// purge empties a topic's stream.
func (e *env) purge(ctx context.Context, topic string) error {
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

// checkStored returns an error unless topic's stream holds exactly n messages.
func (e *env) checkStored(ctx context.Context, topic string, n int) error {
	s, err := e.js.Stream(ctx, jetbus.StreamName(topic))
	if err != nil {
		return err
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(n) {
		return fmt.Errorf("%s holds %d messages, want %d", topic, got, n)
	}
	return nil
}

// deleteConsumers deletes a round's consumers so the server does not carry them into later
// rounds. A consumer its client already deleted is fine.
func (e *env) deleteConsumers(ctx context.Context, stream string, names []string) error {
	for _, n := range names {
		if err := e.js.DeleteConsumer(ctx, stream, n); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
			return fmt.Errorf("delete consumer %s: %w", n, err)
		}
	}
	return nil
}

// ackPollInterval is how often waitAcked asks for consumer state: each ask is a request to
// the server, so it starts only once the client has handled every event.
const ackPollInterval = time.Millisecond

// waitAcked waits until every named consumer of stream has delivered everything its filter
// matches and has no acknowledgement pending: the server's ack floor is at the last event.
// It returns how many deliveries were redeliveries (0 in a healthy run).
func (e *env) waitAcked(ctx context.Context, stream string, names []string) (redelivered int, err error) {
	conss := make([]interface {
		Info(context.Context) (*natsjs.ConsumerInfo, error)
	}, len(names))
	for i, n := range names {
		c, err := e.js.Consumer(ctx, stream, n)
		if errors.Is(err, natsjs.ErrNotPullConsumer) { // Watermill's are push consumers
			conss[i], err = e.js.PushConsumer(ctx, stream, n)
		} else {
			conss[i] = c
		}
		if err != nil {
			return 0, fmt.Errorf("consumer %s: %w", n, err)
		}
	}
	for i := 0; i < len(conss); {
		info, err := conss[i].Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("consumer %s: %w", names[i], err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			redelivered += info.NumRedelivered
			i++
			continue
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("consumer %s: %d pending, %d awaiting ack: %w", names[i], info.NumPending, info.NumAckPending, ctx.Err())
		case <-time.After(ackPollInterval):
		}
	}
	return redelivered, nil
}

// rawMsg is a raw publisher's message: the body and an ID for JetStream's duplicate check.
func rawMsg(subject, id string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(jetbus.HeaderMsgID, id)
	return m
}

// fillAsync publishes n messages made by msg through the admin connection and waits until
// the server stored them all; it is never timed.
func (e *env) fillAsync(ctx context.Context, topic string, n int, msg func(i int) *nats.Msg) error {
	if err := e.purge(ctx, topic); err != nil {
		return err
	}
	for i := range n {
		m := msg(i)
		err := unstall(ctx, e.js.PublishAsyncComplete, func() error {
			_, err := e.js.PublishMsgAsync(m)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := waitComplete(ctx, e.js.PublishAsyncComplete()); err != nil {
		return err
	}
	return e.checkStored(ctx, topic, n)
}

// fillBus publishes n events through the admin Bus, keyed by key(i) unless key is nil.
func (e *env) fillBus(ctx context.Context, topic string, n int, key func(i int) string) error {
	if err := e.purge(ctx, topic); err != nil {
		return err
	}
	for i := range n {
		var opts []jetbus.PublishOption
		if key != nil {
			opts = append(opts, jetbus.WithKey(key(i)))
		}
		err := unstall(ctx, e.bus.PublishAsyncComplete, func() error {
			_, err := e.bus.PublishAsync(ctx, topic, body, opts...)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := waitComplete(ctx, e.bus.PublishAsyncComplete()); err != nil {
		return err
	}
	return e.checkStored(ctx, topic, n)
}

// unstall runs publish, one asynchronous publish; when it fails because too many publishes
// await their acks for too long (a loaded machine: nats.go gives up after 200 ms), it waits
// until every ack came back and tries again, a few times. The fills use it, and so do both
// asynchronous publish sides (the Bus and raw nats.go, alike), whose wait is then part of
// the time measured: back-pressure, as an application would meet it.
func unstall(ctx context.Context, complete func() <-chan struct{}, publish func() error) error {
	for try := 0; ; try++ {
		err := publish()
		// The Bus keeps nats.go's error values out of its API (the text stays).
		stalled := err != nil && (errors.Is(err, natsjs.ErrTooManyStalledMsgs) ||
			strings.Contains(err.Error(), natsjs.ErrTooManyStalledMsgs.Error()))
		if !stalled || try == 5 {
			return err
		}
		if err := waitComplete(ctx, complete()); err != nil {
			return err
		}
	}
}

func waitComplete(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for publish acks: %w", ctx.Err())
	}
}
