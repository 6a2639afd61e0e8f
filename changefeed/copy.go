package changefeed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// newCopy begins a copy: it captures the stream's start point first (so that every change
// made during the copy is published after it), then lists the collections to copy and
// estimates their documents.
func (f *Feed) newCopy(ctx context.Context) (*CopyState, error) {
	tok, err := f.currentToken(ctx)
	if err != nil {
		return nil, err
	}
	start, err := encodeToken(tok)
	if err != nil {
		return nil, err
	}
	nss, err := f.namespaces(ctx)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, ns := range nss {
		db, coll, _ := strings.Cut(ns, ".")
		n, err := f.client.Database(db).Collection(coll).EstimatedDocumentCount(ctx)
		if err != nil {
			return nil, err
		}
		total += n
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &CopyState{Epoch: hex.EncodeToString(b[:]), StartToken: start, Namespaces: nss, Total: total, Began: time.Now().UTC()}, nil
}

// namespaces lists the collections a copy reads, sorted: the feed's collection, the
// collections of its database, or those of every database but admin, config and local.
func (f *Feed) namespaces(ctx context.Context) ([]string, error) {
	if f.cfg.Collection != "" {
		return []string{f.cfg.Database + "." + f.cfg.Collection}, nil
	}
	dbs := []string{f.cfg.Database}
	if f.cfg.Database == "" {
		names, err := f.client.ListDatabaseNames(ctx, bson.D{})
		if err != nil {
			return nil, err
		}
		dbs = slices.DeleteFunc(names, func(n string) bool { return n == "admin" || n == "config" || n == "local" })
	}
	var out []string
	for _, db := range dbs {
		colls, err := f.client.Database(db).ListCollectionNames(ctx, bson.D{})
		if err != nil {
			return nil, err
		}
		for _, c := range colls {
			if !strings.HasPrefix(c, "system.") {
				out = append(out, db+"."+c)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// copy publishes every document of the copy's collections not yet acknowledged, in _id order,
// then switches the position to streaming from the copy's start token.
func (r *run) copy(ctx context.Context, rec *recovery) error {
	f, cp := r.f, r.pos.Copy
	w := newWindow(f.cfg.MaxInFlight, r.onDone)
	var err error
	next := cp.Done // the reader's own count: the acker advances cp.Done
	after := r.lastID
	for ; next < len(cp.Namespaces) && err == nil && ctx.Err() == nil; next++ {
		err = r.copyCollection(ctx, w, cp.Namespaces[next], after, cp.Epoch, rec)
		if err == nil && ctx.Err() == nil {
			err = w.push(ctx, &entry{step: step{kind: stepNamespace}})
		}
		after = nil
	}
	if errors.Is(err, errWindowFailed) || ctx.Err() != nil {
		err = nil
	}
	unsettled, werr := w.close()
	if werr != nil {
		return &windowError{err: werr, unsettled: unsettled}
	}
	if err == nil && ctx.Err() == nil && cp.Done == len(cp.Namespaces) {
		f.log.Info("copy done; streaming the changes made since it began", "epoch", cp.Epoch, "copied", cp.Copied)
		tok, derr := decodeToken(cp.StartToken)
		if derr != nil {
			return derr
		}
		r.pos = Position{Phase: PhaseStream, HistoryLost: r.pos.HistoryLost}
		r.tok, r.lastID, r.ct = tok, nil, tokenTime(tok)
		if m := f.metrics; m != nil {
			set(m.copyProgress, 1)
		}
		return r.save(ctx)
	}
	if r.dirty {
		if serr := r.save(ctx); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// copyCollection publishes the documents of ns after the _id in after (a {"_id": …}
// document; nil: from the start). Documents are read through an aggregation that shapes
// each as an insert event, so that the feed's pipeline applies to the copy as to the stream.
func (r *run) copyCollection(ctx context.Context, w *window, ns string, after bson.Raw, epoch string, rec *recovery) error {
	f := r.f
	db, coll, _ := strings.Cut(ns, ".")
	pipeline := mongo.Pipeline{}
	if after != nil {
		pipeline = append(pipeline, bson.D{{Key: "$match", Value: afterID(after.Lookup("_id"))}})
	}
	pipeline = append(pipeline,
		bson.D{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
		bson.D{{Key: "$replaceWith", Value: bson.D{
			{Key: "_id", Value: "$_id"},
			{Key: "operationType", Value: bson.D{{Key: "$literal", Value: "insert"}}},
			{Key: "ns", Value: bson.D{{Key: "db", Value: bson.D{{Key: "$literal", Value: db}}}, {Key: "coll", Value: bson.D{{Key: "$literal", Value: coll}}}}},
			{Key: "documentKey", Value: bson.D{{Key: "_id", Value: "$_id"}}},
			{Key: "fullDocument", Value: "$$ROOT"},
		}}},
	)
	pipeline = append(pipeline, f.cfg.Pipeline...)
	cur, err := f.client.Database(db).Collection(coll).Aggregate(ctx, pipeline, options.Aggregate().SetBatchSize(int32(f.cfg.CopyBatchSize)))
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	return pump(ctx, w, f.send, rec, func(ctx context.Context) (*item, error) {
		if err := nextDocument(ctx, cur); err != nil {
			return nil, err
		}
		c := &change{op: opRead, db: db, coll: coll, wall: time.Now()}
		raw := cur.Current
		c.id = raw.Lookup("documentKey", "_id")
		c.fullDoc, c.hasFullDoc = raw.Lookup("fullDocument"), true
		if c.id.Type == 0 {
			return nil, fmt.Errorf("%w: a copied document of %s has no _id", errMalformed, ns)
		}
		lastID, err := bson.Marshal(bson.D{{Key: "_id", Value: c.id}})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errMalformed, err)
		}
		m, err := f.render(ctx, c, epoch)
		if err != nil {
			return nil, err
		}
		return &item{e: &entry{step: step{kind: stepCopied, lastID: lastID, key: m.key}}, m: m}, nil
	})
}

// afterID is the filter for the documents whose _id sorts after id. A range operator
// compares within one BSON type only, so documents whose _id is of a type that sorts later
// are added by type.
func afterID(id bson.RawValue) bson.D {
	gt := bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: id}}}}
	later := laterTypes(id.Type)
	if len(later) == 0 {
		return gt
	}
	return bson.D{{Key: "$or", Value: bson.A{gt, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}}}}}
}

// typeOrder is MongoDB's comparison order of BSON types, by bracket (types in one bracket
// compare by value with each other).
var typeOrder = [][]string{
	{"minKey"}, {"null"}, {"double", "int", "long", "decimal"}, {"symbol", "string"},
	{"object"}, {"array"}, {"binData"}, {"objectId"}, {"bool"}, {"date"}, {"timestamp"},
	{"regex"}, {"dbPointer"}, {"javascript"}, {"javascriptWithScope"}, {"maxKey"},
}

var typeAlias = map[bson.Type]string{
	bson.TypeMinKey: "minKey", bson.TypeNull: "null", bson.TypeDouble: "double", bson.TypeInt32: "int",
	bson.TypeInt64: "long", bson.TypeDecimal128: "decimal", bson.TypeSymbol: "symbol", bson.TypeString: "string",
	bson.TypeEmbeddedDocument: "object", bson.TypeArray: "array", bson.TypeBinary: "binData",
	bson.TypeObjectID: "objectId", bson.TypeBoolean: "bool", bson.TypeDateTime: "date",
	bson.TypeTimestamp: "timestamp", bson.TypeRegex: "regex", bson.TypeDBPointer: "dbPointer",
	bson.TypeJavaScript: "javascript", bson.TypeCodeWithScope: "javascriptWithScope", bson.TypeMaxKey: "maxKey",
}

// laterTypes returns the type aliases of the brackets after t's.
func laterTypes(t bson.Type) bson.A {
	name := typeAlias[t]
	var out bson.A
	found := false
	for _, bracket := range typeOrder {
		if found {
			for _, n := range bracket {
				out = append(out, n)
			}
			continue
		}
		found = slices.Contains(bracket, name)
	}
	return out
}
