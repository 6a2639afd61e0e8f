package changefeed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// maxAwait bounds each wait of the change stream for new changes: how quickly a quiet
// stream reports MongoDB's post-batch resume token (heartbeats) and notices a stop.
const maxAwait = time.Second

// streamOptions returns the change stream options of the feed, without a start point.
func (f *Feed) streamOptions() *options.ChangeStreamOptionsBuilder {
	o := options.ChangeStream().
		SetFullDocument(options.FullDocument(f.cfg.FullDocument)).
		SetMaxAwaitTime(min(f.cfg.Heartbeat, maxAwait))
	if f.cfg.Format == FormatEnvelope {
		o.SetFullDocumentBeforeChange(options.WhenAvailable)
	}
	return o
}

// watch opens a change stream on the feed's collection, database or deployment.
func (f *Feed) watch(ctx context.Context, pipeline mongo.Pipeline, o *options.ChangeStreamOptionsBuilder) (*mongo.ChangeStream, error) {
	if pipeline == nil {
		pipeline = mongo.Pipeline{}
	}
	switch {
	case f.cfg.Database == "":
		return f.client.Watch(ctx, pipeline, o)
	case f.cfg.Collection == "":
		return f.client.Database(f.cfg.Database).Watch(ctx, pipeline, o)
	}
	return f.client.Database(f.cfg.Database).Collection(f.cfg.Collection).Watch(ctx, pipeline, o)
}

// currentToken returns a resume token for now: the post-batch resume token MongoDB reports
// for a stream opened without a start point.
func (f *Feed) currentToken(ctx context.Context) (bson.Raw, error) {
	cs, err := f.watch(ctx, nil, options.ChangeStream().SetMaxAwaitTime(10*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	tok := cs.ResumeToken()
	if tok == nil && !cs.TryNext(ctx) {
		tok = cs.ResumeToken()
	}
	if tok == nil {
		if err := cs.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: MongoDB reported no resume token for a new change stream (it needs 4.0.7 or later)", errMalformed)
	}
	return clone(tok), nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// stream publishes changes from the position until ctx ends or something fails. rec, when
// set, publishes the first changes one at a time (see recovery).
func (r *run) stream(ctx context.Context, rec *recovery) error {
	f := r.f
	o := f.streamOptions()
	switch {
	case r.tok != nil:
		o.SetStartAfter(r.tok)
	case r.pos.At != nil:
		o.SetStartAtOperationTime(&bson.Timestamp{T: r.pos.At.T, I: r.pos.At.I})
	}
	cs, err := f.watch(ctx, f.cfg.Pipeline, o)
	if err != nil {
		return err
	}
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	w := newWindow(f.cfg.MaxInFlight, r.onDone)
	err = r.readStream(ctx, cs, w, rec)
	unsettled, werr := w.close()
	if r.dirty && werr == nil {
		if serr := r.save(ctx); serr != nil && err == nil {
			err = serr
		}
	}
	if werr != nil {
		return &windowError{err: werr, unsettled: unsettled}
	}
	return err
}

// readStream reads cs and pushes one entry per change (and per quiet getMore) into w, in
// order.
func (r *run) readStream(ctx context.Context, cs *mongo.ChangeStream, w *window, rec *recovery) error {
	f := r.f
	var lastHeartbeat []byte
	var lastPush time.Time
	return pump(ctx, w, f.send, rec, func(ctx context.Context) (*item, error) {
		ok, err := nextChange(ctx, cs, "change stream")
		if err != nil {
			return nil, err
		}
		if !ok {
			// A quiet stream: MongoDB's post-batch resume token moves on without changes. It
			// is pushed when it moved, and again every Heartbeat while it stands still, so a
			// position onDone did not save yet (it came too soon after the last save) is saved
			// even when nothing follows it.
			tok := cs.ResumeToken()
			if tok == nil {
				return nil, nil
			}
			moved := string(tok) != string(lastHeartbeat)
			if !moved && time.Since(lastPush) < f.cfg.Heartbeat {
				return nil, nil
			}
			if moved {
				lastHeartbeat = clone(tok)
			}
			f.metrics.lagged(tokenTime(lastHeartbeat).Time())
			lastPush = time.Now()
			return &item{e: &entry{step: step{kind: stepHeartbeat, token: lastHeartbeat}}}, nil
		}
		c, err := decodeChange(cs.Current)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errMalformed, err)
		}
		c.token = clone(c.token)
		st := step{kind: stepChange, token: c.token, clusterT: uint64(c.clusterTime.T)<<32 | uint64(c.clusterTime.I)}
		if c.op == "invalidate" {
			f.log.Warn("change stream invalidated (collection dropped or renamed, or database dropped); watching on after it")
			return &item{e: &entry{step: step{kind: stepHeartbeat, token: c.token}}}, errInvalidated
		}
		if !c.isDocumentChange() {
			// drop, rename, dropDatabase: no document to publish; the position moves past it.
			f.log.Info("change without a document skipped", "op", c.op, "ns", c.ns())
			st.kind = stepHeartbeat
			return &item{e: &entry{step: st}}, nil
		}
		f.read(c.wall)
		m, err := f.render(ctx, c, "")
		if err != nil {
			return nil, err
		}
		st.key = m.key
		return &item{e: &entry{step: st}, m: m}, nil
	})
}

// render makes the event of change c: epoch is the copy's ("" for a change).
func (f *Feed) render(ctx context.Context, c *change, epoch string) (*message, error) {
	key, err := Key(c.id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	after := c.fullDoc
	switch {
	case c.op == "delete":
		after = bson.RawValue{}
	case c.op == "update" && f.cfg.FullDocument == FullDocumentWhenAvailable && (after.Type == 0 || after.Type == bson.TypeNull):
		// No post-image recorded: the document as it is now, as updateLookup would.
		if after, err = f.lookup(ctx, c); err != nil {
			return nil, err
		}
	}
	var payload []byte
	if f.cfg.Format == FormatEnvelope {
		payload, err = envelope(make([]byte, 0, 256), f.cfg.Name, c, key, after, time.Now())
	} else if after.Type == 0 || after.Type == bson.TypeNull {
		payload = []byte("null")
	} else {
		payload, err = appendJSON(make([]byte, 0, len(after.Value)+len(after.Value)/4), after)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	id := ""
	if epoch != "" {
		id = copyID(f.cfg.Name, epoch, c.ns(), key)
	} else {
		id = tokenID(f.cfg.Name, c.token)
	}
	return &message{
		topic: f.cfg.topicFor(c.db, c.coll), payload: payload, id: id, key: key, ts: c.wall,
		headers: f.headers.headersOf(c), change: c,
	}, nil
}

// lookup reads the document c changed as it is now (null when it is gone).
func (f *Feed) lookup(ctx context.Context, c *change) (bson.RawValue, error) {
	raw, err := f.client.Database(c.db).Collection(c.coll).FindOne(ctx, bson.D{{Key: "_id", Value: c.id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bson.RawValue{Type: bson.TypeNull}, nil
	}
	if err != nil {
		return bson.RawValue{}, err
	}
	return bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: raw}, nil
}
