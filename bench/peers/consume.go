package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/jetstream"
)

// handler is the work done per event on every side: it gets the body.
type handler func(body []byte) error

func noop([]byte) error { return nil }

// decode is what a typical handler starts with.
func decode(b []byte) error {
	var v map[string]any
	return json.Unmarshal(b, &v)
}

// Settings every consumer shares with the Bus's defaults.
const (
	ackWait       = jetbus.DefaultAckTimeout
	maxAckPending = jetbus.DefaultMaxInFlight
	pullBatch     = jetbus.DefaultBatchSize
)

// consumeTopics are the one-partition stores of the consume and decode scenarios, each
// filled once by its side's own publisher format.
type consumeTopics struct{ bus, raw, watermill string }

// fillConsumeTopics creates and fills the stores of the consume and decode scenarios.
func (e *env) fillConsumeTopics(ctx context.Context, n int, progress io.Writer) (consumeTopics, error) {
	t := consumeTopics{bus: "peers.consume.jetbus", raw: "peers.consume.raw", watermill: "peers.consume.watermill"}
	for _, topic := range []string{t.bus, t.raw, t.watermill} {
		if err := e.ensureTopic(ctx, topic, 1); err != nil {
			return t, err
		}
	}
	fmt.Fprintf(progress, "storing %d events for each consume side\n", n)
	if err := e.fillBus(ctx, t.bus, n, nil); err != nil {
		return t, err
	}
	rawSubject := jetbus.PartitionSubject(t.raw, 0)
	if err := e.fillAsync(ctx, t.raw, n, func(int) *nats.Msg { return rawMsg(rawSubject, uuid.NewString()) }); err != nil {
		return t, err
	}
	wmSubject := jetbus.PartitionSubject(t.watermill, 0)
	var marshaler wmnats.NATSMarshaler
	err := e.fillAsync(ctx, t.watermill, n, func(int) *nats.Msg {
		// What Watermill's publisher sends: its marshaler's message plus the Nats-Msg-Id
		// TrackMsgId adds.
		wm := newWatermillMessage()
		m, _ := marshaler.Marshal(wmSubject, wm) // cannot fail
		m.Header.Set(nats.MsgIdHdr, wm.UUID)
		return m
	})
	return t, err
}

// consumeScenario measures consuming and acknowledging cfg.ConsumeEvents stored events from
// a one-subject stream with h as the handler on every side.
func consumeScenario(ctx context.Context, e *env, cfg Config, name string, topics consumeTopics, h handler, progress io.Writer) (*result, error) {
	n := cfg.ConsumeEvents
	sides := []side{
		{"jetbus (Subscribe)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeBus(ctx, topics.bus, n, h)
		}},
		{"jetbus (Subscribe, Unordered)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeBus(ctx, topics.bus, n, h, jetbus.Unordered())
		}},
		{"watermill (AckAsync)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeWatermill(ctx, topics.watermill, n, h, true)
		}},
		{"watermill (default: AckSync)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeWatermill(ctx, topics.watermill, n, h, false)
		}},
		{"raw nats.go (pull, Messages)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeRaw(ctx, topics.raw, 1, n, h, rawPlain)
		}},
		// The two raw clients of consumers set up as the Bus's read the Bus's own events: the
		// same messages, headers included, so the ratio is what the Bus's client adds.
		{"raw nats.go (pull, window 1000)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeRaw(ctx, topics.bus, 1, n, h, rawWindow)
		}},
		{"raw nats.go (pull, pinned, window 1000)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeRaw(ctx, topics.bus, 1, n, h, rawPinned)
		}},
	}
	label := "consume + ack, no-op handler"
	if name == scenarioDecode {
		label = "consume + ack, JSON-decoding handler"
	}
	return runRounds(ctx, cfg, name, n, []metric{{label, unitRate, true}}, sides, progress)
}

// counter counts handled events and closes done at the n-th.
type counter struct {
	n     int64
	count atomic.Int64
	once  sync.Once
	done  chan struct{}
}

func newCounter(n int) *counter { return &counter{n: int64(n), done: make(chan struct{})} }

func (c *counter) add() {
	if c.count.Add(1) == c.n {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *counter) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("handled %d of %d events: %w", c.count.Load(), c.n, ctx.Err())
	}
}

// finish waits until the server has every event acknowledged and returns the rate since t0.
func (e *env) finish(ctx context.Context, t0 time.Time, stream string, consumers []string, n int) ([]float64, error) {
	redelivered, err := e.waitAcked(ctx, stream, consumers)
	if err != nil {
		return nil, err
	}
	d := time.Since(t0)
	if redelivered > 0 {
		return nil, fmt.Errorf("%d redeliveries: the run is not comparable", redelivered)
	}
	return []float64{float64(n) / d.Seconds()}, nil
}

// consumeBus is the Bus side: Subscribe with its defaults (batch 100, in-flight 1000, ack
// timeout 30s, pinned consumer) and opts (Unordered: a consumer without a pin) from the
// earliest event, on a fresh group and connection.
func (e *env) consumeBus(ctx context.Context, topic string, n int, h handler, opts ...jetbus.SubscribeOption) ([]float64, error) {
	nc, err := e.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc)
	if err != nil {
		return nil, err
	}
	defer bus.Close()
	group := e.name("bus")
	c := newCounter(n)
	t0 := time.Now()
	sub, err := bus.Subscribe(ctx, topic, group, func(_ context.Context, d *jetbus.Delivery) error {
		if err := h(d.Payload); err != nil {
			return err
		}
		c.add()
		return nil
	}, append([]jetbus.SubscribeOption{jetbus.FromEarliest()}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer sub.Stop()
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	stream, consumers := jetbus.StreamName(topic), []string{jetbus.ConsumerName(group, 0)}
	res, err := e.finish(ctx, t0, stream, consumers, n)
	if err != nil {
		return nil, err
	}
	_ = sub.Stop()
	return res, e.deleteConsumers(ctx, stream, consumers)
}

// consumeWatermill is Watermill's subscriber: a durable push consumer (AckExplicit, deliver
// all) through nats.go's legacy JetStream API, one subscriber goroutine, each message handed
// over an unbuffered channel and acknowledged when the handler acks it; ackAsync sends the ack
// without waiting for the server's confirmation (AckAsync), otherwise each ack is awaited
// (AckSync, Watermill's default).
func (e *env) consumeWatermill(ctx context.Context, topic string, n int, h handler, ackAsync bool) ([]float64, error) {
	nc, err := e.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	durable := e.name("wm")
	sub, err := wmnats.NewSubscriberWithNatsConn(nc, wmnats.SubscriberSubscriptionConfig{
		Unmarshaler:       &wmnats.NATSMarshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream: wmnats.JetStreamConfig{
			AckAsync:         ackAsync,
			TrackMsgId:       true,
			DurablePrefix:    durable,
			SubscribeOptions: []nats.SubOpt{nats.AckExplicit(), nats.DeliverAll()},
		},
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	msgs, err := sub.Subscribe(subCtx, jetbus.PartitionSubject(topic, 0))
	if err != nil {
		return nil, err
	}
	for i := range n {
		select {
		case m, ok := <-msgs:
			if !ok {
				return nil, fmt.Errorf("subscription closed after %d of %d events", i, n)
			}
			if err := h(m.Payload); err != nil {
				m.Nack()
				return nil, err
			}
			m.Ack()
		case <-ctx.Done():
			return nil, fmt.Errorf("handled %d of %d events: %w", i, n, ctx.Err())
		}
	}
	stream, consumers := jetbus.StreamName(topic), []string{durable}
	res, err := e.finish(ctx, t0, stream, consumers, n)
	if err != nil {
		return nil, err
	}
	cancel()
	if err := sub.Close(); err != nil {
		return nil, err
	}
	return res, e.deleteConsumers(ctx, stream, consumers)
}

// rawMode is how the raw side's consumers are set up.
type rawMode int

const (
	// rawPlain: what a Go user writes first: a durable pull consumer read with Messages and
	// PullMaxMessages(100).
	rawPlain rawMode = iota
	// rawPinned: the consumer as the Bus sets up an ordered group's (pinned_client priority
	// group, the second fence) read with the window the Bus grows to for a fast handler
	// (MaxInFlight, 1000): the ceiling of any client of such a consumer. It reads the Bus's
	// own stored events, so it receives the same messages as the Bus's side.
	rawPinned
	// rawWindow: the consumer as the Bus sets up an unordered group's (no priority policy)
	// read with the same window: the ceiling of a nats.go client of such a consumer, on the
	// Bus's stored events too.
	rawWindow
)

// consumeRaw is raw nats.go: one durable pull consumer per partition of topic (AckExplicit,
// deliver all, the Bus's ack wait and max ack pending; pinned or not, see rawMode), each read
// through a Messages iterator in its own goroutine, every message acknowledged with Ack.
func (e *env) consumeRaw(ctx context.Context, topic string, partitions, n int, h handler, mode rawMode) ([]float64, error) {
	nc, err := e.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx) // a reader's failure ends the wait at once
	defer cancel()
	stream, group := jetbus.StreamName(topic), e.name("raw")
	consumers := make([]string, partitions)
	c := newCounter(n)
	var (
		wg   sync.WaitGroup
		its  []natsjs.MessagesContext
		errs = make([]error, partitions)
	)
	stop := func() {
		for _, it := range its {
			it.Stop()
		}
		wg.Wait()
	}
	defer stop()
	t0 := time.Now()
	for p := range partitions {
		consumers[p] = jetbus.ConsumerName(group, p)
		cfg := natsjs.ConsumerConfig{
			Durable:       consumers[p],
			FilterSubject: jetbus.PartitionSubject(topic, p),
			AckPolicy:     natsjs.AckExplicitPolicy,
			DeliverPolicy: natsjs.DeliverAllPolicy,
			AckWait:       ackWait,
			MaxAckPending: maxAckPending,
		}
		pull := []natsjs.PullMessagesOpt{natsjs.PullMaxMessages(pullBatch)}
		switch mode {
		case rawWindow:
			pull = []natsjs.PullMessagesOpt{natsjs.PullMaxMessages(maxAckPending)}
		case rawPinned:
			cfg.PriorityPolicy = natsjs.PriorityPolicyPinned
			cfg.PriorityGroups = []string{jetbus.PriorityGroup}
			cfg.PinnedTTL = 10 * time.Second
			pull = []natsjs.PullMessagesOpt{natsjs.PullMaxMessages(maxAckPending), natsjs.PullPriorityGroup(jetbus.PriorityGroup)}
		}
		cons, err := js.CreateConsumer(ctx, stream, cfg)
		if err != nil {
			return nil, err
		}
		it, err := cons.Messages(pull...)
		if err != nil {
			return nil, err
		}
		its = append(its, it)
		wg.Go(func() {
			fail := func(err error) { errs[p] = err; cancel() }
			for {
				m, err := it.Next()
				if errors.Is(err, natsjs.ErrMsgIteratorClosed) {
					return
				} else if errors.Is(err, natsjs.ErrNoHeartbeat) {
					// Not fatal: the iterator pulls again. Said, because the round stood still
					// for two heartbeats (30 s): mostly nats.go's iterator not sending its next
					// pull request (jetstream/wake.go), which the Bus works around.
					fmt.Fprintf(os.Stderr, "note: %s: nats.go's iterator went two heartbeats without a word; it pulls again\n", consumers[p])
					continue
				} else if err != nil {
					fail(err)
					return
				}
				if err := h(m.Data()); err != nil {
					fail(err)
					return
				}
				if err := m.Ack(); err != nil {
					fail(err)
					return
				}
				c.add()
			}
		})
	}
	if err := c.wait(ctx); err != nil {
		stop()
		return nil, errors.Join(append([]error{err}, errs...)...)
	}
	res, err := e.finish(ctx, t0, stream, consumers, n)
	if err != nil {
		return nil, err
	}
	stop() // before deleting: a deleted consumer ends its iterator with an error
	return res, e.deleteConsumers(ctx, stream, consumers)
}
