package snapshotapi

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// The document cache keeps recently read view documents (and the absence of missing ones)
// so that a conditional GET, or a repeated one, is answered without a MongoDB round trip.
// A change stream on each views' database (Server.Run) invalidates an entry when its
// document changes; the cache answers only while that stream runs and has caught up within
// maxStale, so an answer from it is at most that old. Reads with ?after= never use it.
//
// An entry read from MongoDB is installed only if no change of its document was seen since
// the read began (the reader's token), and only in the stream's current epoch: a restarted
// stream empties the database's entries first.

const (
	// maxStale bounds how old the cache's view of MongoDB may be: the stream must have
	// caught up (its last getMore that returned) within this.
	maxStale = time.Second
	// feedAwait is the change stream's maxAwaitTime: how long an idle getMore waits.
	feedAwait = 250 * time.Millisecond
	// entryOverhead approximates an entry's bytes beside its document and key.
	entryOverhead = 128
)

type docKey struct{ db, coll, key string }

// cachedDoc is an immutable cache entry: a view document, or none.
type cachedDoc struct {
	key     docKey
	raw     []byte // nil: no such document (or a kept tombstone)
	version int64
	hasV    bool
	ts      int64 // Unix ms
	hasTS   bool
	size    int64
	elem    *list.Element
}

type dbState struct {
	live    bool
	epoch   uint64
	freshAt time.Time
	off     bool // the stream cannot run here (no change streams): never live
}

type docCache struct {
	maxBytes int64
	now      func() time.Time

	mu      sync.Mutex
	entries map[docKey]*cachedDoc
	lru     list.List
	bytes   int64
	dbs     map[string]*dbState
	seq     uint64            // counts invalidations
	readers map[uint64]int    // readers in flight, by the seq they began at
	recent  map[docKey]uint64 // invalidations readers in flight may not have seen

	// onCheckpoint is told of every write to a checkpoint of db (read-your-writes waits on
	// it); onRestart when a stream (re)opens and may have missed some.
	onCheckpoint func(db, id string)
	onRestart    func()
}

// streaming reports whether db's change stream runs and has caught up lately: then it
// reports checkpoint writes (onCheckpoint). A nil cache never streams.
func (c *docCache) streaming(db string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.usable(db)
	return ok
}

func newDocCache(maxBytes int64) *docCache {
	if maxBytes <= 0 {
		return nil
	}
	return &docCache{maxBytes: maxBytes, now: time.Now, entries: map[docKey]*cachedDoc{},
		dbs: map[string]*dbState{}, readers: map[uint64]int{}, recent: map[docKey]uint64{}}
}

// usable reports whether the cache may answer for db; c.mu held.
func (c *docCache) usable(db string) (*dbState, bool) {
	st := c.dbs[db]
	return st, st != nil && st.live && c.now().Sub(st.freshAt) <= maxStale
}

// get returns the entry of k when the cache may answer for it.
func (c *docCache) get(k docKey) (*cachedDoc, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.usable(k.db); !ok {
		return nil, false
	}
	e := c.entries[k]
	if e == nil {
		return nil, false
	}
	c.lru.MoveToFront(e.elem)
	return e, true
}

// token is a reader's claim to install what it reads.
type token struct {
	ok    bool
	epoch uint64
	seq   uint64
}

// begin is called before a MongoDB read whose result may be installed; end must follow.
func (c *docCache) begin(db string) token {
	if c == nil {
		return token{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.usable(db)
	if !ok {
		return token{}
	}
	c.readers[c.seq]++
	return token{ok: true, epoch: st.epoch, seq: c.seq}
}

func (c *docCache) end(t token) {
	if !t.ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readers[t.seq]--; c.readers[t.seq] <= 0 {
		delete(c.readers, t.seq)
	}
	switch {
	case len(c.readers) == 0:
		clear(c.recent)
	case len(c.recent) > 4096:
		oldest := ^uint64(0)
		for s := range c.readers {
			oldest = min(oldest, s)
		}
		for k, s := range c.recent {
			if s <= oldest {
				delete(c.recent, k)
			}
		}
	}
}

// put installs d, read under t, unless its document changed since t began.
func (c *docCache) put(t token, d *cachedDoc) {
	if !t.ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.dbs[d.key.db]
	if st == nil || !st.live || st.epoch != t.epoch || c.recent[d.key] > t.seq {
		return
	}
	d.size = int64(len(d.raw)+len(d.key.key)+len(d.key.coll)) + entryOverhead
	if d.size > c.maxBytes/8 {
		return // one document may not crowd out the rest
	}
	if old := c.entries[d.key]; old != nil {
		c.remove(old)
	}
	d.elem = c.lru.PushFront(d)
	c.entries[d.key] = d
	c.bytes += d.size
	for c.bytes > c.maxBytes {
		c.remove(c.lru.Back().Value.(*cachedDoc))
	}
}

func (c *docCache) remove(e *cachedDoc) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
	c.bytes -= e.size
}

// invalidate drops k: its document changed.
func (c *docCache) invalidate(k docKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if e := c.entries[k]; e != nil {
		c.remove(e)
	}
	if len(c.readers) > 0 {
		c.recent[k] = c.seq
	}
}

// reset empties db's entries and starts a new epoch; live says whether the cache may
// answer for db from now on.
func (c *docCache) reset(db string, live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.dbs[db]
	if st == nil {
		st = &dbState{}
		c.dbs[db] = st
	}
	st.epoch++
	st.live = live
	st.freshAt = c.now()
	for k, e := range c.entries {
		if k.db == db {
			c.remove(e)
		}
	}
}

// caughtUp records that db's stream had delivered every change up to at.
func (c *docCache) caughtUp(db string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.dbs[db]; st != nil && st.live && at.After(st.freshAt) {
		st.freshAt = at
	}
}

// errStreamEnded restarts a change stream that ended without an error (an invalidate).
var errStreamEnded = fmt.Errorf("%w: change stream ended", jetbus.ErrUnavailable)

// feedPolicy restarts the change stream while MongoDB is unavailable.
var feedPolicy = retry.Policy{Backoff: retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}

// feed runs db's change stream until ctx ends. It returns nil then, or the error that
// showed change streams cannot run on this deployment (the cache then stays off for db).
func (c *docCache) feed(ctx context.Context, client *mongo.Client, db string, log *slog.Logger) error {
	err := retry.Do(ctx, feedPolicy, func(ctx context.Context) error {
		err := c.feedOnce(ctx, client, db)
		c.reset(db, false)
		if ctx.Err() == nil && err != nil {
			log.Debug("document cache: change stream stopped; reads go to MongoDB until it runs again", "database", db, "error", err)
		}
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	c.mu.Lock()
	c.dbs[db].off = true
	c.mu.Unlock()
	return err
}

func (c *docCache) feedOnce(ctx context.Context, client *mongo.Client, db string) error {
	pipeline := mongo.Pipeline{{{Key: "$project", Value: bson.D{
		{Key: "operationType", Value: 1}, {Key: "ns", Value: 1}, {Key: "documentKey", Value: 1},
	}}}}
	cs, err := client.Database(db).Watch(ctx, pipeline, options.ChangeStream().SetMaxAwaitTime(feedAwait).SetBatchSize(1000))
	if err != nil {
		return err
	}
	defer cs.Close(context.WithoutCancel(ctx))
	// The stream is open: changes from now on reach it. Entries read from now on may be kept.
	c.reset(db, true)
	if c.onRestart != nil {
		c.onRestart()
	}
	var getMoreAt time.Time
	for {
		if cs.RemainingBatchLength() == 0 {
			getMoreAt = c.now()
		}
		if cs.TryNext(ctx) {
			if !c.apply(db, cs.Current) {
				return errStreamEnded
			}
		} else if err := cs.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		} else if cs.ID() == 0 {
			return errStreamEnded
		}
		if cs.RemainingBatchLength() == 0 {
			c.caughtUp(db, getMoreAt)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// apply applies one change event; false when the stream is invalidated.
func (c *docCache) apply(db string, ev bson.Raw) bool {
	d := bsoncore.Document(ev)
	op, _ := d.Lookup("operationType").StringValueOK()
	coll, _ := d.Lookup("ns", "coll").StringValueOK()
	switch op {
	case "insert", "update", "replace", "delete":
		if key, ok := d.Lookup("documentKey", "_id").StringValueOK(); ok {
			c.invalidate(docKey{db, coll, key})
			if coll == CheckpointsCollection && c.onCheckpoint != nil {
				c.onCheckpoint(db, key)
			}
		}
		return true
	case "invalidate":
		c.reset(db, false)
		return false
	}
	// drop, rename, dropDatabase and anything new: forget the database's entries.
	c.reset(db, true)
	return true
}

// off reports whether db's stream gave up.
func (c *docCache) isOff(db string) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.dbs[db]
	return st != nil && st.off
}
