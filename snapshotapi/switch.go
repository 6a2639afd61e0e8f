package snapshotapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus"
)

// A rebuild switches a view to a new generation: another collection, written from the
// earliest event again (docs/views.md). A watch follows the switch without a gap and
// without going back on a key:
//
//  1. It notices the switch (it resolves the live collection at most once a second) and
//     takes a cluster time T, the time of a snapshot read.
//  2. It reads the old generation's changes up to T and sends them; when the old
//     generation changed after T (its projectors follow the switch within about a second)
//     it starts again with a later T.
//  3. The client then holds the old generation as it was at T. In one snapshot at T the
//     watch compares, key by key in key order, the documents its filters match in either
//     generation, and sends what differs: the new generation's document where its version
//     is greater, a delete where a document the client holds no longer matches in the new
//     generation (with the new version). When the new generation is behind the old one on
//     a key it holds (a version lower, or the key missing), or disagrees at one version,
//     the watch starts again with a later T: the new generation catches up, being the live
//     one. After Config.SwitchTimeout (a new generation that never catches up on a key: a
//     changed projection, whose versions cannot be compared) the watch ends with
//     position_expired, and the client starts again from a snapshot.
//  4. It goes on with the new generation's changes after T.
//
// Each message of step 3 has a position within the switch (the new collection, T, the old
// collection, the last key sent and the filters), so a client cut off goes on with the keys
// after it, at the same T, while the old generation still exists and T is within the
// snapshot history; a position of a previous generation is resumed through the same steps
// while that generation exists (the rebuild's grace period), and is a 410 afterwards. The
// cost of a switch is, per watch, a read of what its filters match in both generations.

// DefaultSwitchTimeout bounds how long a watch waits for a new generation to catch up with
// the one it replaced.
const DefaultSwitchTimeout = 30 * time.Second

// switchRetry is how long a watch waits before trying a switch again.
const switchRetry = 200 * time.Millisecond

// errNotCaughtUp says the new generation is behind the old one at the time tried.
var errNotCaughtUp = errors.New("snapshotapi: the new generation is behind the old one")

// errSwitchExpired ends a watch whose switch could not be made.
var errSwitchExpired = fmt.Errorf("%w: the view was rebuilt and its new generation does not follow on from the old one", jetbus.ErrUnavailable)

// diffEntry is one message of a switch.
type diffEntry struct {
	key     string
	del     bool
	version int64
	doc     bsoncore.Document
}

// generationDiff compares, in the snapshot sess reads at, the documents cond matches in
// collection old and in collection cur, for keys after after (in key order): what a client
// that holds old at that time must be sent to hold cur. It returns errNotCaughtUp when cur
// is behind old on a key.
func (s *Server) generationDiff(ctx context.Context, sess *mongo.Session, v *view, conds []condition, old, cur, after string) ([]diffEntry, error) {
	ctx = mongo.NewSessionContext(ctx, sess)
	and := bson.A{bson.D{{Key: "_deleted", Value: bson.D{{Key: "$ne", Value: true}}}}}
	for _, c := range conds {
		and = append(and, c.filter())
	}
	if after != "" {
		and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}}})
	}
	filter := bson.D{{Key: "$and", Value: and}}
	sort := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(1000)
	oldCur, err := v.db.Collection(old).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(1000).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "_v", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer oldCur.Close(context.WithoutCancel(ctx))
	if v.listProjection != nil {
		sort.SetProjection(v.listProjection)
	}
	newCur, err := v.db.Collection(cur).Find(ctx, filter, sort)
	if err != nil {
		return nil, err
	}
	defer newCur.Close(context.WithoutCancel(ctx))

	type side struct {
		c    *mongo.Cursor
		key  string
		v    int64
		doc  bsoncore.Document
		done bool
	}
	advance := func(sd *side) error {
		for sd.c.Next(ctx) {
			d := bsoncore.Document(sd.c.Current)
			k, ok := d.Lookup("_id").StringValueOK()
			if !ok {
				continue
			}
			sd.key, sd.doc = k, append(bsoncore.Document(nil), d...)
			sd.v, _ = intValue(d.Lookup("_v"))
			return nil
		}
		sd.done = true
		return sd.c.Err()
	}
	// A key matched in one generation only needs its version in the other, whatever it is
	// there (a marker, not matching, no document): those are read after the merge, many
	// keys a read, not one round trip a key (a new generation that ran ahead of the old one
	// differs on many keys, and every watch makes this diff).
	type lookup struct {
		at      int   // its entry in out
		oldOnly bool  // matched in old only: a delete if cur's version is greater
		v       int64 // its version where it matched
	}
	var lookups []lookup
	var inOld, inCur []string // the keys whose version is read in old, in cur
	a, b := &side{c: oldCur}, &side{c: newCur}
	if err := advance(a); err != nil {
		return nil, err
	}
	if err := advance(b); err != nil {
		return nil, err
	}
	var out []diffEntry
	for !a.done || !b.done {
		switch {
		case !a.done && !b.done && a.key == b.key: // matched in both
			switch {
			case b.v > a.v:
				out = append(out, diffEntry{key: b.key, version: b.v, doc: b.doc})
			case b.v < a.v:
				return nil, fmt.Errorf("%w: key %q is at %d in %s, %d in %s", errNotCaughtUp, a.key, a.v, old, b.v, cur)
			}
			if err := advance(a); err != nil {
				return nil, err
			}
			if err := advance(b); err != nil {
				return nil, err
			}
		case b.done || (!a.done && a.key < b.key): // the client holds it; the new generation does not match it
			lookups = append(lookups, lookup{at: len(out), oldOnly: true, v: a.v})
			out = append(out, diffEntry{key: a.key, del: true})
			inCur = append(inCur, a.key)
			if err := advance(a); err != nil {
				return nil, err
			}
		default: // matched in the new generation only
			lookups = append(lookups, lookup{at: len(out), v: b.v})
			out = append(out, diffEntry{key: b.key, version: b.v, doc: b.doc})
			inOld = append(inOld, b.key)
			if err := advance(b); err != nil {
				return nil, err
			}
		}
	}
	oldVersions, err := versions(ctx, v.db.Collection(old), inOld)
	if err != nil {
		return nil, err
	}
	curVersions, err := versions(ctx, v.db.Collection(cur), inCur)
	if err != nil {
		return nil, err
	}
	for _, l := range lookups {
		e := &out[l.at]
		if l.oldOnly {
			nv, ok := curVersions[e.key]
			if !ok || nv <= l.v {
				return nil, fmt.Errorf("%w: key %q is at %d in %s, %d (found %v) in %s, where it does not match", errNotCaughtUp, e.key, l.v, old, nv, ok, cur)
			}
			e.version = nv
			continue
		}
		if ov, ok := oldVersions[e.key]; ok && l.v <= ov {
			return nil, fmt.Errorf("%w: key %q is at %d in %s, where it does not match, %d in %s", errNotCaughtUp, e.key, ov, old, l.v, cur)
		}
	}
	return out, nil
}

// versionsBatch bounds the keys of one read of versions.
const versionsBatch = 1000

// versions reads the version of each of keys in coll, whatever its document is (a marker,
// not matching the filters); a key without a document is absent from the map.
func versions(ctx context.Context, coll *mongo.Collection, keys []string) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	for len(keys) > 0 {
		batch := keys[:min(len(keys), versionsBatch)]
		keys = keys[len(batch):]
		cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: batch}}}},
			options.Find().SetProjection(bson.D{{Key: "_v", Value: 1}}).SetBatchSize(versionsBatch))
		if err != nil {
			return nil, err
		}
		for cur.Next(ctx) {
			d := bsoncore.Document(cur.Current)
			if k, ok := d.Lookup("_id").StringValueOK(); ok {
				out[k], _ = intValue(d.Lookup("_v"))
			}
		}
		err = cur.Err()
		_ = cur.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// collectionExists reports whether db holds coll.
func collectionExists(ctx context.Context, db *mongo.Database, coll string) (bool, error) {
	names, err := db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: coll}})
	return len(names) > 0, err
}

// switchEntries turns a diff into the watch's messages at switch position base (whose after
// each entry's key replaces).
func switchEntries(diff []diffEntry, base streamPos) []*change {
	out := make([]*change, 0, len(diff))
	for _, d := range diff {
		p := base
		p.after = d.key
		ch := &change{pos: p, key: d.key, version: d.version, paths: []string{}}
		if d.del {
			ch.kind = changeMarker
		} else {
			ch.kind, ch.doc = changeUpsert, d.doc
		}
		out = append(out, ch)
	}
	return out
}

// follow moves w from the generation it reads to the live one (steps 1 to 4 above); it
// returns errSwitchExpired when it cannot, or the error that ended the watch.
func (w *watcher) follow(live liveState) error {
	s, v := w.s, w.v
	old := w.coll
	deadline := time.Now().Add(s.cfg.SwitchTimeout)
	for try := 1; ; try++ {
		if time.Now().After(deadline) {
			return errSwitchExpired
		}
		ok, err := w.trySwitch(old, live.collection)
		if err != nil || !ok {
			why := "the old generation changed after the time tried"
			if err != nil {
				why = err.Error()
			}
			s.log.Debug("watch: the switch to the new generation waits", "view", v.Name, "from", old, "to", live.collection, "try", try, "why", why)
		}
		switch {
		case err == nil && ok:
			return nil
		case errors.Is(err, errCollectionGone):
			return errSwitchExpired // the old generation was dropped before the watch left it
		case errors.Is(err, errOverflow) || errors.Is(err, errSwitchExpired) || errors.Is(err, errShuttingDown):
			return err
		case err != nil && !errors.Is(err, errNotCaughtUp) && !retryable(err):
			return err
		}
		t := time.NewTimer(switchRetry)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return w.ctx.Err()
		}
		if l, err := v.resolve(w.ctx, s.now); err == nil && l.collection != live.collection {
			live = l // switched again meanwhile
		}
	}
}

// retryable reports whether a failure of a switch's reads may pass.
func retryable(err error) bool {
	var se mongo.ServerError
	return !errors.As(err, &se) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, jetbus.ErrUnavailable)
}

// trySwitch tries the switch at one cluster time: false when the old generation changed
// after it, or the new one is behind.
func (w *watcher) trySwitch(old, cur string) (bool, error) {
	s, v, ctx := w.s, w.v, w.ctx
	sess, err := s.mongo.StartSession(options.Session().SetSnapshot(true))
	if err != nil {
		return false, err
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	// The snapshot's time: the first read in the session fixes it.
	if err := v.db.Collection(cur).FindOne(mongo.NewSessionContext(ctx, sess), bson.D{}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return false, err
	}
	ts := sess.SnapshotTime()
	if ts.IsZero() {
		return false, errors.New("snapshotapi: MongoDB reported no atClusterTime for a snapshot read")
	}
	at := allAt(v.Database, old, ts)
	// Every change of the old generation up to ts, read and given to the client.
	head, err := w.h.passed(ctx)
	if err != nil {
		return false, err
	}
	if err := w.drainTo(head); err != nil {
		return false, err
	}
	if at.less(head) {
		return false, nil // the old generation changed after ts: try a later one
	}
	if err := w.flushed(); err != nil {
		return false, err
	}
	diff, err := s.generationDiff(ctx, sess, v, w.conds, old, cur, "")
	if err != nil {
		return false, err
	}
	if ok, err := collectionExists(ctx, v.db, old); err != nil || !ok {
		if err == nil {
			err = errSwitchExpired // dropped meanwhile: what was read may be incomplete
		}
		return false, err
	}
	return true, w.moveTo(cur, ts, switchEntries(diff, streamPos{db: v.Database, coll: cur, ts: ts, binding: w.binding, prev: old}))
}

// moveTo gives the client a switch's messages, then reads generation cur from its position
// at ts on. It opens what reads cur first: when that fails, nothing was given and the watch
// is where it was, so that the switch can be tried again without sending anything twice.
// When cur's hub does not hold ts any more, w reads cur from ts on a change stream of its
// own, as a resumed watch does: it takes a place among the catch-ups (Config.MaxCatchUps)
// for it, and when none is free it waits its turn after giving the messages (its drainer
// opens the stream then, or ends the watch if it cannot).
func (w *watcher) moveTo(cur string, ts bson.Timestamp, msgs []*change) error {
	if !w.s.switchGate(w.ctx) {
		return w.ctx.Err()
	}
	to := allAt(w.v.Database, cur, ts)
	h, err := w.s.acquireHub(w.ctx, to)
	if err != nil {
		return err
	}
	var src *changeSource
	cursor, inRing := h.seek(to)
	slot := !inRing && w.s.catchups.tryAcquire()
	undo := func() {
		if src != nil {
			src.close(w.ctx)
		}
		if slot {
			w.s.catchups.release()
		}
		h.release()
	}
	if slot {
		if src, err = w.s.openSource(w.ctx, to); err != nil {
			undo()
			return err
		}
	}
	msgs = append(msgs, &change{pos: to, key: switchedKey})
	for _, ch := range msgs {
		kind := "switched"
		if ch.key != switchedKey {
			kind = diffKind(ch)
		}
		if err := w.put(ch, kind); err != nil {
			undo()
			return err
		}
	}
	w.h.release()
	w.h, w.coll, w.from = h, cur, to
	w.joinTS, w.unknown = bson.Timestamp{}, nil // what the client holds is exact again
	w.setProcessed(to)
	w.cursor, w.src = cursor, src
	switch {
	case slot:
		w.slot = true
		w.ws.caughtUp("switched")
	case !inRing:
		w.catchFrom, w.catchWhy, w.queued = to, "switched", true
	}
	return nil
}

// diffKind is the event of a switch's message.
func diffKind(ch *change) string {
	if ch.kind == changeUpsert {
		return "upsert"
	}
	return "delete"
}

// resumeSwitch reads the rest of a switch cut off at position from: the messages for the
// keys after from.after, at the same cluster time.
func (s *Server) resumeSwitch(ctx context.Context, v *view, wp watchParams, from streamPos) ([]*change, error) {
	sess, err := s.mongo.StartSession(options.Session().SetSnapshot(true).SetSnapshotTime(from.ts))
	if err != nil {
		return nil, err
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	diff, err := s.generationDiff(ctx, sess, v, wp.conds, from.prev, from.coll, from.after)
	if errors.Is(err, errNotCaughtUp) {
		// It was caught up at this time when the switch began: the generations changed since
		// (dropped and rebuilt).
		return nil, errSwitchExpired
	}
	if err != nil {
		return nil, err
	}
	base := from
	return switchEntries(diff, base), nil
}

// switchedKey holds the place of a switch's last message in a watch's buffer: no key is
// empty.
const switchedKey = ""

// put puts a message in w's buffer, waiting while it is full.
func (w *watcher) put(ch *change, kind string) error {
	if kind == "" {
		return nil
	}
	for {
		w.mu.Lock()
		if len(w.pending) < w.bound {
			if e := w.pending[ch.key]; e != nil {
				w.order.Remove(e)
			}
			w.pending[ch.key] = w.order.PushBack(pendingMsg{ch: ch, kind: kind})
			w.mu.Unlock()
			select {
			case w.ready <- struct{}{}:
			default:
			}
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.space:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
}

// drainTo reads the hub's ring until every change up to head is in w's buffer.
func (w *watcher) drainTo(head streamPos) error {
	for {
		chs, next, h, _, lost, err := w.h.read(w.cursor)
		switch {
		case err != nil:
			return err
		case lost:
			return errOverflow
		}
		for _, ch := range chs {
			if head.less(ch.pos) {
				return nil
			}
			if err := w.put(ch, w.kindOf(ch)); err != nil {
				return err
			}
			delete(w.unknown, ch.key)
			w.cursor++
		}
		w.cursor = next
		if !h.less(head) {
			w.setProcessed(head)
			return nil
		}
	}
}

// errOverflow ends a watch that fell behind the hub's ring.
var errOverflow = errors.New("snapshotapi: the watch fell behind")

// flushed waits until the writer sent everything in w's buffer.
func (w *watcher) flushed() error {
	for {
		w.mu.Lock()
		n := w.order.Len()
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-w.space:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
}
