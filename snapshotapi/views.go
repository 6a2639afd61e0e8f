package snapshotapi

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Collections of docs/views.md.
const (
	ProjectionsCollection = "jetbus_projections"
	CheckpointsCollection = "jetbus_checkpoints"
	// HistorySuffix names a live collection's history: <collection>_history.
	HistorySuffix = "_history"
	// liveTTL bounds how long a resolved live collection is used (docs/views.md: at most a
	// second).
	liveTTL = time.Second
)

// view is a declared view, ready to serve.
type view struct {
	View
	filterNames []string
	fields      *fieldSet
	tags        [2]string // view tag without and with meta
	genTags     atomic.Pointer[genTags]
	// cacheControl is the Cache-Control field value, shared by every response (see
	// cacheHeaders).
	cacheControl []string
	db           *mongo.Database
	// projections is jetbus_projections, read with majority read concern.
	projections *mongo.Collection
	// listProjection is the projection of list reads (nil: whole documents).
	listProjection bson.D
	live           liveCache
}

func newView(v View, client *mongo.Client) *view {
	vw := &view{View: v, fields: newFieldSet(v.Fields), tags: viewTag(v), db: client.Database(v.Database),
		cacheControl: []string{v.CacheControl}[:1:1]}
	vw.projections = vw.db.Collection(ProjectionsCollection, options.Collection().SetReadConcern(readconcern.Majority()))
	vw.filterNames = slices.Sorted(maps.Keys(v.Filters))
	if len(v.Fields) > 0 {
		p := bson.D{{Key: "_id", Value: 1}, {Key: "_v", Value: 1}, {Key: "_ts", Value: 1}, {Key: "_deleted", Value: 1}}
		for _, f := range v.Fields {
			p = append(p, bson.E{Key: f, Value: 1})
		}
		for _, f := range v.Sort {
			if !slices.Contains(v.Fields, f) {
				p = append(p, bson.E{Key: f, Value: 1})
			}
		}
		vw.listProjection = dedupeProjection(p)
	}
	return vw
}

// dedupeProjection drops paths already covered by a shorter one (MongoDB refuses a path and
// its prefix in one projection: "Path collision").
func dedupeProjection(p bson.D) bson.D {
	var out bson.D
	for _, e := range p {
		covered := slices.ContainsFunc(p, func(o bson.E) bool {
			return o.Key != e.Key && strings.HasPrefix(e.Key, o.Key+".")
		})
		if !covered && !slices.ContainsFunc(out, func(o bson.E) bool { return o.Key == e.Key }) {
			out = append(out, e)
		}
	}
	return out
}

// liveState is where a view reads now: docs/views.md's live collection and group.
type liveState struct {
	collection string
	group      string
	// at is the cluster time of the majority read that resolved them (zero: unknown): every
	// change of the view up to it is majority-committed, so a read that starts after the
	// resolution sees it. It is the position a list reflects at least.
	at bson.Timestamp
}

// liveCache resolves a projection's live collection at most once a second, one request at
// a time.
type liveCache struct {
	mu         sync.Mutex
	cur        liveState
	at         time.Time
	ok         bool
	wait       chan struct{}
	refreshing bool // peek's lookup is under way
}

func (v *view) resolve(ctx context.Context, now func() time.Time) (liveState, error) {
	lc := &v.live
	for {
		lc.mu.Lock()
		if lc.ok && now().Sub(lc.at) < liveTTL {
			st := lc.cur
			lc.mu.Unlock()
			return st, nil
		}
		if w := lc.wait; w != nil {
			lc.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return liveState{}, ctx.Err()
			}
		}
		w := make(chan struct{})
		lc.wait = w
		lc.mu.Unlock()
		start := now()
		st, err := v.fetchLive(ctx)
		lc.mu.Lock()
		lc.wait = nil
		if err == nil {
			lc.cur, lc.at, lc.ok = st, start, true
		}
		lc.mu.Unlock()
		close(w)
		return st, err
	}
}

// peek returns the live state last resolved without waiting, for the watches, which check
// it about once a second to follow a rebuild: none of them waits for a lookup (a slow one
// would hold every watch of the view back at once, behind the changes). When it is older
// than liveTTL, peek starts one lookup in the background, within timeout, whose result a
// later peek returns. ok is false when none was resolved yet.
func (v *view) peek(ctx context.Context, now func() time.Time, timeout time.Duration) (liveState, bool) {
	lc := &v.live
	lc.mu.Lock()
	st, ok := lc.cur, lc.ok
	refresh := (!ok || now().Sub(lc.at) >= liveTTL) && !lc.refreshing
	if refresh {
		lc.refreshing = true
	}
	lc.mu.Unlock()
	if refresh {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, _ = v.resolve(ctx, now)
			lc.mu.Lock()
			lc.refreshing = false
			lc.mu.Unlock()
		}()
	}
	return st, ok
}

func (v *view) fetchLive(ctx context.Context) (liveState, error) {
	st := liveState{collection: v.Collection, group: v.Projection}
	var rec struct {
		Collection string `bson:"collection"`
		Group      string `bson:"group"`
	}
	// A majority read in a session of its own: its operationTime is the majority-committed
	// point it read at (MongoDB answers a majority read with that time), a cluster time up to
	// which every change is visible to the reads that follow.
	sess, err := v.db.Client().StartSession()
	if err != nil {
		return st, err
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	err = v.projections.FindOne(mongo.NewSessionContext(ctx, sess), bson.D{{Key: "_id", Value: v.Projection}}).Decode(&rec)
	if ot := sess.OperationTime(); ot != nil && (err == nil || errors.Is(err, mongo.ErrNoDocuments)) {
		st.at = *ot
	}
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return st, nil
	case err != nil:
		return st, err
	}
	if rec.Collection != "" {
		st.collection = rec.Collection
	}
	if rec.Group != "" {
		st.group = rec.Group
	}
	return st, nil
}

// readDoc reads key's document from the live collection: from the cache unless noCache,
// otherwise from MongoDB (and installs what it read).
func (s *Server) readDoc(ctx context.Context, v *view, live liveState, key string, noCache bool) (*cachedDoc, bool, error) {
	k := docKey{v.Database, live.collection, key}
	if !noCache {
		if d, ok := s.cache.get(k); ok {
			s.metrics.cacheLookup("hit")
			return d, true, nil
		}
		s.metrics.cacheLookup("miss")
	} else {
		s.metrics.cacheLookup("bypass")
	}
	t := s.cache.begin(v.Database)
	defer s.cache.end(t)
	raw, err := v.db.Collection(live.collection).FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
	d := &cachedDoc{key: k}
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return nil, false, err
	default:
		doc := bsoncore.Document(raw)
		if del, _ := doc.Lookup("_deleted").BooleanOK(); !del {
			d.raw = raw
			d.version, d.hasV = intValue(doc.Lookup("_v"))
			if ms, ok := doc.Lookup("_ts").DateTimeOK(); ok {
				d.ts, d.hasTS = ms, true
			}
		}
	}
	s.cache.put(t, d)
	return d, false, nil
}

// intValue reads a version: a 64- or 32-bit integer, or an integral double.
func intValue(v bsoncore.Value) (int64, bool) {
	switch v.Type {
	case bsoncore.TypeInt64:
		return v.Int64OK()
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		return int64(n), ok
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if ok && f == float64(int64(f)) {
			return int64(f), true
		}
	}
	return 0, false
}

// historyRecord is the version of a key at a time, from <live>_history.
type historyRecord struct {
	found   bool
	deleted bool
	doc     []byte
	version int64
	hasV    bool
	ts      int64
	hasTS   bool
}

// readHistory finds the state of key at t: the history record with the greatest (_ts, _v)
// such that _ts <= t (docs/views.md).
func (v *view) readHistory(ctx context.Context, live liveState, key string, at time.Time) (historyRecord, error) {
	var rec historyRecord
	filter := bson.D{{Key: "_key", Value: key}, {Key: "_ts", Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(at)}}}}
	opts := options.FindOne().SetSort(bson.D{{Key: "_ts", Value: -1}, {Key: "_v", Value: -1}})
	raw, err := v.db.Collection(live.collection+HistorySuffix).FindOne(ctx, filter, opts).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return rec, nil
	case err != nil:
		return rec, err
	}
	d := bsoncore.Document(raw)
	rec.found = true
	rec.version, rec.hasV = intValue(d.Lookup("_v"))
	if ms, ok := d.Lookup("_ts").DateTimeOK(); ok {
		rec.ts, rec.hasTS = ms, true
	}
	doc, ok := d.Lookup("doc").DocumentOK()
	if !ok {
		rec.deleted = true // null: the event deleted the key
		return rec, nil
	}
	if del, _ := doc.Lookup("_deleted").BooleanOK(); del {
		rec.deleted = true
		return rec, nil
	}
	rec.doc = doc
	return rec, nil
}

func bsonLookup(d bson.Raw, key string) bsoncore.Value { return bsoncore.Document(d).Lookup(key) }

func bsonString(d bson.Raw, key string) (string, bool) {
	return bsoncore.Document(d).Lookup(key).StringValueOK()
}
