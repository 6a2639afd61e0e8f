package projection

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// History: <collection>_history holds every applied version of every key (docs/views.md):
// {_id: "<key>/<_v>", _key, _v, _ts, doc}. The projection reads the batch's keys before
// writing (once per batch), so that it knows which events apply over what is stored and
// what the document is after each; the history is written after the view, so it never holds
// a version the view refused.

// Names of the history's indexes.
const (
	historyKeyIndex = "jetbus_key_ts_v"
	historyTTLIndex = "jetbus_ttl"
)

func ensureHistoryIndexes(ctx context.Context, hist *mongo.Collection, retention time.Duration) error {
	_, err := hist.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "_key", Value: 1}, {Key: fieldTS, Value: -1}, {Key: fieldVersion, Value: -1}},
		Options: options.Index().SetName(historyKeyIndex),
	})
	if err != nil {
		return err
	}
	ttl := mongo.IndexModel{
		Keys:    bson.D{{Key: fieldTS, Value: 1}},
		Options: options.Index().SetName(historyTTLIndex).SetExpireAfterSeconds(int32(min(retention/time.Second, 1<<31-1))),
	}
	_, err = hist.Indexes().CreateOne(ctx, ttl)
	var ce mongo.CommandError
	if errors.As(err, &ce) && (ce.Code == 85 || ce.Code == 86) {
		// The retention changed: replace the TTL index.
		if err := hist.Indexes().DropOne(ctx, historyTTLIndex); err != nil {
			return err
		}
		_, err = hist.Indexes().CreateOne(ctx, ttl)
	}
	return err
}

// preRead reads the stored documents of the batch's keys (only their versions in replace
// mode), once per batch: a retry of the batch must see what was stored before its first try.
func (v *view) preRead(ctx context.Context, b *batch, keys []*keyEvents) (map[string]bson.Raw, error) {
	if m, ok := b.memo.(map[string]bson.Raw); ok {
		return m, nil
	}
	ids := make(bson.A, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.key)
	}
	o := options.Find()
	if v.c.cfg.Mode == Replace {
		o.SetProjection(bson.D{{Key: fieldVersion, Value: 1}})
	}
	cur, err := v.coll.Find(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}}, o)
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	m := make(map[string]bson.Raw, len(keys))
	for cur.Next(ctx) {
		id, ok := cur.Current.Lookup(fieldID).StringValueOK()
		if ok {
			m[id] = append(bson.Raw(nil), cur.Current...)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	b.memo = m
	return m, nil
}

// writeHistory writes a history document for each event that applied: newer than what was
// stored before it, and not dead-lettered.
func (v *view) writeHistory(ctx context.Context, keys []*keyEvents, pre map[string]bson.Raw) error {
	var models []mongo.WriteModel
	for _, k := range keys {
		state := bsoncore.Document(pre[k.key])
		var cur int64
		has := false
		if state != nil {
			cur, has = state.Lookup(fieldVersion).Int64OK()
		}
		for _, en := range k.evs {
			if en.out == outDeadLetter {
				continue
			}
			ch := changeOf(en)
			if has && ch.ver <= cur {
				continue
			}
			state = v.after(state, *ch)
			cur, has = ch.ver, true
			models = append(models, mongo.NewReplaceOneModel().
				SetFilter(bson.D{{Key: fieldID, Value: k.key + "/" + strconv.FormatInt(cur, 10)}}).
				SetReplacement(historyDocument(k.key, *ch, state)).SetUpsert(true))
		}
	}
	if len(models) == 0 {
		return nil
	}
	_, err := v.hist.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil {
		for _, we := range bwe.WriteErrors {
			if classifyWriteError(we.WriteError) == nil {
				return err
			}
			v.c.set.log.Warn("a history document was refused; the view has the version, its history does not", "projection", v.c.cfg.Name, "err", we.Message)
		}
		return nil
	}
	return err
}

// after returns the view document after change c applied over state (nil: no document).
func (v *view) after(state bsoncore.Document, c change) bsoncore.Document {
	switch {
	case c.kind == kindTombstone && v.c.cfg.Tombstones == DeleteTombstones:
		return nil
	case c.kind == kindTombstone:
		return tombstoneDocument(c.key, c.ver, c.ts, c.topic, true, 0)
	case v.c.cfg.Mode == Replace:
		return c.doc
	}
	// Merge: the stored fields the event does not name, then the event's, then metadata.
	drop := map[string]bool{fieldVersion: true, fieldTS: true, fieldTopic: true, fieldDeleted: true, fieldExpires: true}
	for _, n := range c.unset {
		drop[n] = true
	}
	set, _ := c.doc.Elements()
	for _, el := range set {
		drop[el.Key()] = true
	}
	idx, dst := bsoncore.AppendDocumentStart(nil)
	if state == nil {
		dst = bsoncore.AppendStringElement(dst, fieldID, c.key)
	} else {
		old, _ := state.Elements()
		for _, el := range old {
			if !drop[el.Key()] {
				dst = append(dst, el...)
			}
		}
	}
	dst = bsoncore.AppendInt64Element(dst, fieldVersion, c.ver)
	dst = bsoncore.AppendDateTimeElement(dst, fieldTS, c.ts)
	dst = bsoncore.AppendStringElement(dst, fieldTopic, c.topic)
	for _, el := range set {
		dst = append(dst, el...)
	}
	doc, _ := bsoncore.AppendDocumentEnd(dst, idx)
	return doc
}

// historyDocument is {_id, _key, _v, _ts, doc}: doc is state without _id, or null.
func historyDocument(key string, c change, state bsoncore.Document) bson.Raw {
	idx, dst := bsoncore.AppendDocumentStart(nil)
	dst = bsoncore.AppendStringElement(dst, fieldID, key+"/"+strconv.FormatInt(c.ver, 10))
	dst = bsoncore.AppendStringElement(dst, "_key", key)
	dst = bsoncore.AppendInt64Element(dst, fieldVersion, c.ver)
	dst = bsoncore.AppendDateTimeElement(dst, fieldTS, c.ts)
	if state == nil {
		dst = bsoncore.AppendNullElement(dst, "doc")
	} else {
		di, d := bsoncore.AppendDocumentElementStart(dst, "doc")
		els, _ := state.Elements()
		for _, el := range els {
			if el.Key() != fieldID {
				d = append(d, el...)
			}
		}
		dst, _ = bsoncore.AppendDocumentEnd(d, di)
	}
	doc, _ := bsoncore.AppendDocumentEnd(dst, idx)
	return bson.Raw(doc)
}
