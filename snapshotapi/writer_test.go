package snapshotapi_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/snapshotapi"
)

// writer applies events to a view exactly as docs/views.md says a changelog projection
// does, so the API can be tested before package projection exists: the document {_id: key,
// _v, _ts, _topic, payload fields} upserted under the version guard (tombstones delete),
// its history record {_id: "<key>/<_v>", _key, _v, _ts, doc}, and the checkpoint
// {_id: "<group>/<topic>/p<n>", seq, ts} after the write.
type writer struct {
	db          *mongo.Database
	coll, group string
	topic       string
	keepHistory bool
	keepDeleted bool // tombstones: keep
}

// handle is a jetbus.Handler: the version is the event's stream sequence.
func (w *writer) handle(ctx context.Context, d *jetbus.Delivery) error {
	ev := d.Event
	var payload bson.D
	if string(ev.Payload) != "null" {
		if err := bson.UnmarshalExtJSON(ev.Payload, false, &payload); err != nil {
			return jetbus.Permanent(err)
		}
	}
	if err := w.apply(ctx, ev.Key, int64(ev.Seq), ev.TS, payload); err != nil {
		return err
	}
	return w.checkpoint(ctx, ev.Partition, ev.Seq)
}

// apply writes version v of key (payload nil: a tombstone).
func (w *writer) apply(ctx context.Context, key string, v int64, ts time.Time, payload bson.D) error {
	doc := bson.D{{Key: "_v", Value: v}, {Key: "_ts", Value: bson.NewDateTimeFromTime(ts)}, {Key: "_topic", Value: w.topic}}
	for _, e := range payload {
		if n, ok := e.Value.(int32); ok {
			e.Value = int64(n) // integral JSON numbers are 64-bit integers
		}
		doc = append(doc, e)
	}
	coll := w.db.Collection(w.coll)
	guard := bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: bson.D{{Key: "$lt", Value: v}}}}
	var err error
	switch {
	case payload == nil && !w.keepDeleted:
		_, err = coll.DeleteOne(ctx, guard)
	case payload == nil:
		_, err = coll.ReplaceOne(ctx, guard, append(bson.D{{Key: "_id", Value: key}}, append(doc[:3:3], bson.E{Key: "_deleted", Value: true})...), options.Replace().SetUpsert(true))
	default:
		_, err = coll.ReplaceOne(ctx, guard, append(bson.D{{Key: "_id", Value: key}}, doc...), options.Replace().SetUpsert(true))
	}
	if mongo.IsDuplicateKeyError(err) {
		err = nil // a newer version is stored: the guard kept it
	}
	if err != nil || !w.keepHistory {
		return err
	}
	var state any = doc
	if payload == nil {
		state = nil
	}
	_, err = w.db.Collection(w.coll+snapshotapi.HistorySuffix).ReplaceOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%d", key, v)}},
		bson.D{{Key: "_key", Value: key}, {Key: "_v", Value: v}, {Key: "_ts", Value: bson.NewDateTimeFromTime(ts)}, {Key: "doc", Value: state}},
		options.Replace().SetUpsert(true))
	return err
}

func (w *writer) checkpoint(ctx context.Context, partition int, seq uint64) error {
	_, err := w.db.Collection(snapshotapi.CheckpointsCollection).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: snapshotapi.CheckpointID(w.group, w.topic, partition)}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "seq", Value: int64(seq)}}}, {Key: "$set", Value: bson.D{{Key: "ts", Value: bson.NewDateTimeFromTime(time.Now())}}}},
		options.UpdateOne().SetUpsert(true))
	return err
}

var errStalled = errors.New("stalled")
