package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// partitionKeys is how many distinct keys the partitioned events are spread over.
const partitionKeys = 1000

func partitionKey(i int) string { return "k" + strconv.Itoa(i%partitionKeys) }

// partitionsScenario measures consuming cfg.PartitionedEvents stored keyed events of a
// cfg.Partitions topic with a do-nothing handler: one partition.Subscribe member against one
// raw pull consumer per partition.
func partitionsScenario(ctx context.Context, e *env, cfg Config, progress io.Writer) (*result, error) {
	busTopic, rawTopic := "peers.partitioned.jetbus", "peers.partitioned.raw"
	for _, t := range []string{busTopic, rawTopic} {
		if err := e.ensureTopic(ctx, t, cfg.Partitions); err != nil {
			return nil, err
		}
	}
	n := cfg.PartitionedEvents
	fmt.Fprintf(progress, "storing %d keyed events over %d partitions for each side\n", n, cfg.Partitions)
	if err := e.fillBus(ctx, busTopic, n, partitionKey); err != nil {
		return nil, err
	}
	err := e.fillAsync(ctx, rawTopic, n, func(i int) *nats.Msg {
		p := jetbus.PartitionOf(partitionKey(i), cfg.Partitions)
		return rawMsg(jetbus.PartitionSubject(rawTopic, p), uuid.NewString())
	})
	if err != nil {
		return nil, err
	}
	sides := []side{
		{"jetbus (partition.Subscribe, 1 member)", func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumePartitioned(ctx, busTopic, cfg.Partitions, n)
		}},
		{fmt.Sprintf("raw nats.go (%d pull consumers)", cfg.Partitions), func(ctx context.Context, _ int) ([]float64, error) {
			return e.consumeRaw(ctx, rawTopic, cfg.Partitions, n, noop, rawPlain)
		}},
	}
	label := fmt.Sprintf("%d partitions, consume + ack, no-op handler", cfg.Partitions)
	return runRounds(ctx, cfg, scenarioPartitions, n, []metric{{label, unitRate, true}}, sides, progress)
}

// consumePartitioned is one member of a fresh group through partition.Subscribe (default TTL,
// the Bus's default subscribe options, from the earliest event): it joins, leases every
// partition and consumes each through the Bus. The group's bucket is deleted afterwards.
func (e *env) consumePartitioned(ctx context.Context, topic string, partitions, n int) ([]float64, error) {
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
	group := e.name("part")
	c := newCounter(n)
	t0 := time.Now()
	sub, err := partition.Subscribe(ctx, bus, bus.JetStream(), partition.Config{Topic: topic, Group: group},
		func(context.Context, *jetbus.Delivery) error { c.add(); return nil }, jetbus.FromEarliest())
	if err != nil {
		return nil, err
	}
	defer sub.Stop()
	if err := c.wait(ctx); err != nil {
		return nil, errors.Join(err, sub.Err())
	}
	stream := jetbus.StreamName(topic)
	consumers := make([]string, partitions)
	for p := range consumers {
		consumers[p] = jetbus.ConsumerName(group, p)
	}
	res, err := e.finish(ctx, t0, stream, consumers, n)
	if err != nil {
		return nil, err
	}
	if err := sub.Stop(); err != nil {
		return nil, err
	}
	if err := e.deleteConsumers(ctx, stream, consumers); err != nil {
		return nil, err
	}
	if err := e.js.DeleteKeyValue(ctx, partition.GroupBucket(group)); err != nil && !errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, err
	}
	return res, nil
}
