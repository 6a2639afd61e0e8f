package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/jetstream"
)

// publishers are the three publishing clients, each on its own connection.
type publishers struct {
	bus   *jetstream.Bus
	js    natsjs.JetStream
	wm    *wmnats.Publisher
	conns []*nats.Conn
}

func (e *env) newPublishers(ctx context.Context) (*publishers, error) {
	p := &publishers{}
	conn := func() (*nats.Conn, error) {
		nc, err := e.connect()
		if err == nil {
			p.conns = append(p.conns, nc)
		}
		return nc, err
	}
	nc, err := conn()
	if err != nil {
		return nil, err
	}
	if p.bus, err = jetstream.Open(ctx, nc, jetstream.WithAsyncMaxPending(asyncMaxPending)); err != nil {
		p.close()
		return nil, err
	}
	if nc, err = conn(); err != nil {
		p.close()
		return nil, err
	}
	if p.js, err = natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(asyncMaxPending)); err != nil {
		p.close()
		return nil, err
	}
	if nc, err = conn(); err != nil {
		p.close()
		return nil, err
	}
	if p.wm, err = newWatermillPublisher(nc); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// newWatermillPublisher is Watermill's JetStream publisher as its documentation sets it up:
// JetStream on, message UUIDs as Nats-Msg-Id (TrackMsgId) so JetStream drops duplicates, the
// default marshaler (payload as body, metadata and UUID as headers). Streams exist already.
func newWatermillPublisher(nc *nats.Conn) (*wmnats.Publisher, error) {
	return wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler:         &wmnats.NATSMarshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream:         wmnats.JetStreamConfig{TrackMsgId: true},
	}, watermill.NopLogger{})
}

func (p *publishers) close() {
	if p.bus != nil {
		_ = p.bus.Close()
	}
	for _, nc := range p.conns {
		nc.Close()
	}
}

// publishTopics creates one topic per side under prefix and returns their names.
func (e *env) publishTopics(ctx context.Context, prefix string, sides ...string) (map[string]string, error) {
	topics := make(map[string]string, len(sides))
	for _, s := range sides {
		t := prefix + "." + s
		if err := e.ensureTopic(ctx, t, 1); err != nil {
			return nil, err
		}
		topics[s] = t
	}
	return topics, nil
}

func newWatermillMessage() *message.Message {
	return message.NewMessage(watermill.NewUUID(), message.Payload(body))
}

// publishScenario measures acknowledged publish throughput: asynchronous publishes and a
// wait for every ack on the Bus and raw sides; Watermill's Publish, which waits for each
// ack, from one goroutine and from cfg.WatermillPublishers goroutines.
func publishScenario(ctx context.Context, e *env, cfg Config, progress io.Writer) (*result, error) {
	p, err := e.newPublishers(ctx)
	if err != nil {
		return nil, err
	}
	defer p.close()
	topics, err := e.publishTopics(ctx, "peers.publish", "jetbus", "raw", "watermill", "watermillgo")
	if err != nil {
		return nil, err
	}
	n := cfg.PublishEvents
	// timed purges the side's stream, times publish and checks every event was stored.
	timed := func(ctx context.Context, topic string, publish func(ctx context.Context, subject string) error) ([]float64, error) {
		if err := e.purge(ctx, topic); err != nil {
			return nil, err
		}
		subject := jetbus.PartitionSubject(topic, 0)
		t0 := time.Now()
		if err := publish(ctx, subject); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		if err := e.checkStored(ctx, topic, n); err != nil {
			return nil, err
		}
		return []float64{float64(n) / d.Seconds()}, nil
	}
	sides := []side{
		{"jetbus (PublishAsync)", func(ctx context.Context, _ int) ([]float64, error) {
			return timed(ctx, topics["jetbus"], func(ctx context.Context, _ string) error {
				for range n {
					err := unstall(ctx, p.bus.PublishAsyncComplete, func() error {
						_, err := p.bus.PublishAsync(ctx, topics["jetbus"], body)
						return err
					})
					if err != nil {
						return err
					}
				}
				return waitComplete(ctx, p.bus.PublishAsyncComplete())
			})
		}},
		{"raw nats.go (PublishMsgAsync)", func(ctx context.Context, _ int) ([]float64, error) {
			return timed(ctx, topics["raw"], func(ctx context.Context, subject string) error {
				for range n {
					m := rawMsg(subject, uuid.NewString())
					err := unstall(ctx, p.js.PublishAsyncComplete, func() error {
						_, err := p.js.PublishMsgAsync(m)
						return err
					})
					if err != nil {
						return err
					}
				}
				return waitComplete(ctx, p.js.PublishAsyncComplete())
			})
		}},
		{"watermill (Publish)", func(ctx context.Context, _ int) ([]float64, error) {
			return timed(ctx, topics["watermill"], func(_ context.Context, subject string) error {
				for range n {
					if err := p.wm.Publish(subject, newWatermillMessage()); err != nil {
						return err
					}
				}
				return nil
			})
		}},
	}
	if g := cfg.WatermillPublishers; g > 0 {
		sides = append(sides, side{fmt.Sprintf("watermill (Publish, %d goroutines)", g), func(ctx context.Context, _ int) ([]float64, error) {
			return timed(ctx, topics["watermillgo"], func(_ context.Context, subject string) error {
				return parallel(g, n, func() error { return p.wm.Publish(subject, newWatermillMessage()) })
			})
		}})
	}
	return runRounds(ctx, cfg, scenarioPublish, n, []metric{{"publish, acked", unitRate, true}}, sides, progress)
}

// parallel calls f n times from g goroutines and returns the first error.
func parallel(g, n int, f func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, g)
	for w := range g {
		share := n / g
		if w < n%g {
			share++
		}
		wg.Go(func() {
			for range share {
				if err := f(); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// syncScenario measures the latency of one synchronous publish at a time: p50 and p99 of
// each round's cfg.SyncEvents publishes per side. Latency drifts with the machine's state
// (timer and scheduler wake-ups), so the sides are not run one after the other: each round
// interleaves them publish by publish (in an order that rotates every publish), and each
// side's figures are taken from its share of that one interleaved run.
func syncScenario(ctx context.Context, e *env, cfg Config, progress io.Writer) (*result, error) {
	p, err := e.newPublishers(ctx)
	if err != nil {
		return nil, err
	}
	defer p.close()
	topics, err := e.publishTopics(ctx, "peers.sync", "jetbus", "raw", "watermill")
	if err != nil {
		return nil, err
	}
	n := cfg.SyncEvents
	publish := []func(ctx context.Context) error{
		func(ctx context.Context) error {
			_, err := p.bus.Publish(ctx, topics["jetbus"], body)
			return err
		},
		func(ctx context.Context) error {
			_, err := p.js.PublishMsg(ctx, rawMsg(jetbus.PartitionSubject(topics["raw"], 0), uuid.NewString()))
			return err
		},
		func(context.Context) error {
			return p.wm.Publish(jetbus.PartitionSubject(topics["watermill"], 0), newWatermillMessage())
		},
	}
	order := []string{"jetbus", "raw", "watermill"}
	// figures[round][side] holds p50 and p99 of the side's share of the round's run, made
	// by the round's first side and read by the others.
	figures := map[int][][]float64{}
	interleaved := func(ctx context.Context, round int) error {
		if _, ok := figures[round]; ok {
			return nil
		}
		for _, t := range order {
			if err := e.purge(ctx, topics[t]); err != nil {
				return err
			}
		}
		lat := make([][]float64, len(publish))
		for i := range lat {
			lat[i] = make([]float64, n)
		}
		for i := range n {
			for k := range publish {
				s := (i + k) % len(publish)
				t0 := time.Now()
				if err := publish[s](ctx); err != nil {
					return err
				}
				lat[s][i] = float64(time.Since(t0).Nanoseconds()) / 1e3
			}
		}
		figures[round] = make([][]float64, len(publish))
		for s := range lat {
			if err := e.checkStored(ctx, topics[order[s]], n); err != nil {
				return err
			}
			slices.Sort(lat[s])
			figures[round][s] = []float64{percentile(lat[s], 50), percentile(lat[s], 99)}
		}
		return nil
	}
	share := func(s int) func(ctx context.Context, round int) ([]float64, error) {
		return func(ctx context.Context, round int) ([]float64, error) {
			if err := interleaved(ctx, round); err != nil {
				return nil, err
			}
			return figures[round][s], nil
		}
	}
	sides := []side{
		{"jetbus (Publish)", share(0)},
		{"raw nats.go (PublishMsg)", share(1)},
		{"watermill (Publish)", share(2)},
	}
	metrics := []metric{{"sync publish p50", unitLatency, false}, {"sync publish p99", unitLatency, false}}
	res, err := runRounds(ctx, cfg, scenarioSync, n, metrics, sides, progress)
	if res != nil {
		res.noCPU = true
	}
	return res, err
}
