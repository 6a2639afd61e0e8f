package minimongo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

const benchOps = 10000

func upsertModels(round int) []mongo.WriteModel {
	models := make([]mongo.WriteModel, benchOps)
	for i := range models {
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "k", Value: fmt.Sprintf("key-%05d", i)}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "round", Value: round}}}, {Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}).
			SetUpsert(true)
	}
	return models
}

// benchUpserts runs 10k upserts keyed by a unique index through one BulkWrite per
// iteration. With existing set the keys already exist, so every upsert updates.
func benchUpserts(b *testing.B, existing bool) {
	_, c := startServer(b, minimongo.Options{})
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		coll := c.Database("bench").Collection(fmt.Sprintf("u%d", i))
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
			b.Fatal(err)
		}
		if existing {
			if _, err := coll.BulkWrite(ctx, upsertModels(-1)); err != nil {
				b.Fatal(err)
			}
		}
		models := upsertModels(i)
		b.StartTimer()
		res, err := coll.BulkWrite(ctx, models)
		if err != nil {
			b.Fatal(err)
		}
		if got := res.UpsertedCount + res.ModifiedCount; got != benchOps {
			b.Fatalf("applied %d upserts, want %d", got, benchOps)
		}
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perOp*1000, "ms/10k")
	b.ReportMetric(benchOps/perOp, "upserts/s")
}

func BenchmarkBulkUpsertInsert10k(b *testing.B) { benchUpserts(b, false) }

func BenchmarkBulkUpsertUpdate10k(b *testing.B) { benchUpserts(b, true) }

// BenchmarkChangeStreamDelivery measures how fast inserted documents reach a change stream
// consumer: 10k events per iteration, produced by InsertMany batches of 1000.
func BenchmarkChangeStreamDelivery(b *testing.B) {
	_, c := startServer(b, minimongo.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	coll := c.Database("bench").Collection("events")
	if err := c.Database("bench").CreateCollection(ctx, "events"); err != nil {
		b.Fatal(err)
	}
	docs := make([]any, 1000)
	for i := range docs {
		docs[i] = bson.D{{Key: "i", Value: i}, {Key: "payload", Value: "0123456789abcdef0123456789abcdef"}}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cs, err := coll.Watch(ctx, bson.A{}, options.ChangeStream().SetBatchSize(1000))
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			for j := 0; j < benchOps/len(docs); j++ {
				if _, err := coll.InsertMany(ctx, docs); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for n := 0; n < benchOps; n++ {
			if !cs.Next(ctx) {
				b.Fatalf("stream ended after %d events: %v", n, cs.Err())
			}
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		_ = cs.Close(ctx)
	}
	perIter := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(benchOps/perIter, "events/s")
	b.ReportMetric(perIter*1000, "ms/10k")
}
