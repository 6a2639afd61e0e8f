// Command counter is a transactional projection run as your own process: it counts the
// events of a topic in MongoDB, per key and in all, each event exactly once however often a
// replica is killed. It is what a projection with logic of its own looks like (the projector
// process runs changelog projections from configuration; a handler in Go runs in a program
// like this one, beside it).
//
// Start as many replicas as you like with the same --name: they share the topic's partitions
// as one consumer group, and a killed replica's partitions move to the others. Each batch of
// events and the partition's checkpoint commit in one MongoDB transaction, so an event is
// counted once even when it is delivered again after a crash; a replica that lost its
// partition while it was stalled cannot commit (it is fenced).
//
// With make dev running, in another terminal:
//
//	go run ./examples/counter                  # two terminals: two replicas
//	# publish orders as README's walkthrough does, then:
//	mongosh --quiet "mongodb://127.0.0.1:27017/shop?directConnection=true" --eval 'db.order_counts.find()'
//
// The counts are documents {_id: "key:<event key>", n} and {_id: "all", n}.
//
// SIGINT or SIGTERM stops it cleanly: no more fetching, the batch in hand is committed, the
// partitions are released to the other replicas. The end-to-end tests (e2e/) run two of it
// under the same faults as the projector and check that the counts equal the events.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
)

func main() {
	natsURL := flag.String("nats-url", "nats://127.0.0.1:4222", "NATS server URLs, comma-separated (nats://user:password@host:port to log in)")
	inboxPrefix := flag.String("inbox-prefix", "_INBOX", "subject prefix of the replies to this process's requests: one untrusted clients may not subscribe to (deploy/README.md, NATS users)")
	mongoURI := flag.String("mongo-uri", "mongodb://127.0.0.1:27017/?replicaSet=rs0&directConnection=true", "MongoDB URI (a replica set: transactions)")
	database := flag.String("database", "shop", "database of the counts and the checkpoints")
	collection := flag.String("collection", "order_counts", "collection of the counts")
	topic := flag.String("topic", "orders", "topic counted")
	name := flag.String("name", "orders-counts", "projection name: the consumer group the replicas share")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *natsURL, *inboxPrefix, *mongoURI, *database, *collection, *topic, *name); err != nil {
		log.Error("counter stopped", "err", err)
		os.Exit(1)
	}
	log.Info("counter stopped")
}

func run(ctx context.Context, log *slog.Logger, natsURL, inboxPrefix, mongoURI, database, collection, topic, name string) error {
	nc, err := nats.Connect(natsURL, nats.Name("counter "+name), nats.MaxReconnects(-1), nats.CustomInboxPrefix(inboxPrefix))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc, jetstream.WithLogger(log))
	if err != nil {
		return err
	}
	defer bus.Close()
	// Attach: the DLQ's settings (replicas, retention) are the bridge's, from its config.
	dead, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{Attach: true})
	if err != nil {
		return err
	}
	defer dead.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		return fmt.Errorf("connect to MongoDB: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	}()

	counts := client.Database(database).Collection(collection)
	p, err := projection.NewTransactional(bus, client, dead, count(counts),
		projection.Config{Name: name, Topic: topic, Database: database}, projection.WithLogger(log))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil
			}
			return err
		case <-tick.C:
			if p.Ready(ctx) == nil {
				log.Info("counter running", "name", name, "topic", topic, "collection", database+"."+collection)
				tick.Stop()
			}
		}
	}
}

// count is the handler: inside the batch's transaction (ctx carries its session), one more
// for the event's key and one more in all. Tombstones count too: this counts events, not
// states.
func count(counts *mongo.Collection) projection.TxHandler {
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	upsert := options.UpdateOne().SetUpsert(true)
	return func(ctx context.Context, d *jetbus.Delivery) error {
		if _, err := counts.UpdateOne(ctx, bson.D{{Key: "_id", Value: "key:" + d.Key}}, inc, upsert); err != nil {
			return err
		}
		_, err := counts.UpdateOne(ctx, bson.D{{Key: "_id", Value: "all"}}, inc, upsert)
		return err
	}
}
