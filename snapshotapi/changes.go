package snapshotapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus"
)

// The changes of a view's live collection, as watchers get them: a change stream on the
// collection (fullDocument: updateLookup), its changes numbered by their cluster time and
// their rank among the changes at that time, so that each has a position (position.go).
//
// A message for a change carries exactly the version that change wrote, never another: an
// insert or a replace carries its document; an update carries the version it set (the _v of
// its updateDescription) and the document updateLookup found, but only when that document
// is still at that version — when a later write already moved it on, the change is skipped
// and the later change (which will find its own version, or be skipped for a later one
// still) carries the key. So a message's id is a true position of what it carries: a client
// resuming there gets every later change, and none it already has. An update that set no
// _v did not change the document's version (docs/views.md: _v changes whenever the document
// does) and is skipped. A tombstone marker (_deleted: true) is a delete with its version; a
// document removed from the collection (a marker expiring, a handler deleting) is a delete
// without one.

// Kinds of change.
const (
	changeUpsert  = iota // a live document
	changeMarker         // a tombstone marker: the key was deleted, at a version
	changeRemoved        // the document was removed: no version
)

// change is one change of a collection, shared by every watcher of the collection.
type change struct {
	pos     streamPos
	key     string
	kind    int
	version int64
	doc     bsoncore.Document // changeUpsert only
	// paths are the fields the change set or removed (as the stream names them); none for
	// an insert (there was no document); nil when unknown (a replace, a removal, or an
	// update after one that was skipped): then every field may have changed.
	paths []string
	recv  uint64 // the hub's count of changes read when it read this one
	// at is when the hub read it (since hubEpoch), size what it counts for in the ring.
	at   time.Duration
	size int64

	mu       sync.Mutex
	rendered []renderedMessage
}

type renderedMessage struct {
	kind   string // "upsert" or "delete"
	fields *fieldSet
	meta   bool
	msg    []byte
}

// message returns the SSE message of c as kind ("upsert" or "delete"), rendered with
// fields and meta: rendered once per shape and shared by every watcher.
func (c *change) message(s *Server, kind string, fields *fieldSet, meta bool) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rendered {
		if r.kind == kind && (kind != "upsert" || (r.fields == fields && r.meta == meta)) {
			return r.msg
		}
	}
	if kind == "switched" { // a switch's last message: the position in the new generation
		msg := append([]byte(": generation switched\nid: "), s.positions.encode(c.pos)...)
		msg = append(msg, "\n\n"...)
		c.rendered = append(c.rendered, renderedMessage{kind: kind, msg: msg})
		return msg
	}
	var doc []byte
	if kind == "upsert" {
		doc = c.doc
	}
	msg := appendMessage(nil, s.positions.encode(c.pos), kind, c.key, c.version, c.kind != changeRemoved, doc, renderOpts{fields: fields, meta: meta})
	c.rendered = append(c.rendered, renderedMessage{kind: kind, fields: fields, meta: meta, msg: msg})
	return msg
}

// appendMessage appends one SSE message: id, event and a data line {"key","v","doc"}.
func appendMessage(b []byte, id, event, key string, version int64, hasV bool, doc []byte, o renderOpts) []byte {
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: {\"key\":"...)
	b = appendString(b, key)
	if hasV {
		b = append(b, `,"v":`...)
		b = strconv.AppendInt(b, version, 10)
	}
	if doc != nil {
		b = append(b, `,"doc":`...)
		b = appendDoc(b, doc, o)
	}
	return append(b, "}\n\n"...)
}

// Errors of a change source.
var (
	// errCollectionGone: the collection was dropped or renamed (a rebuild removing a
	// previous generation, or an operator), or the stream was invalidated.
	errCollectionGone = fmt.Errorf("%w: the view's collection was dropped", jetbus.ErrUnavailable)
)

// MongoDB error codes a position can meet.
const (
	codeHistoryLost   = 286 // ChangeStreamHistoryLost: the start is no longer in the oplog
	codeSnapshotOld   = 239 // SnapshotTooOld: a snapshot read at a time no longer kept
	codeInvalidResume = 260 // InvalidResumeToken
)

// expired reports whether err says a position can no longer be resumed.
func expired(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(codeHistoryLost) || se.HasErrorCode(codeSnapshotOld) || se.HasErrorCode(codeInvalidResume))
}

// changeSource reads the changes of one collection after a position.
type changeSource struct {
	cs     *mongo.ChangeStream
	m      *metrics
	closed bool
	head   streamPos // the last change read (skipped ones included), or the start
	// curTS, curN: the cluster time of the last change the stream returned, and how many
	// it returned at that time.
	curTS   bson.Timestamp
	curN    uint32
	counted bool
	// skipTS, skip: changes at skipTS the start position already covers.
	skipTS bson.Timestamp
	skip   uint32
	// dirty are keys with a skipped update: the fields it changed are unknown to the next
	// change of the key, which therefore reports every field as changed.
	dirty map[string]bool
}

// sourceAwait is the change streams' maxAwaitTime: how long an idle getMore waits.
const sourceAwait = 500 * time.Millisecond

// openSource opens a change stream on db.coll right after from.
func (srv *Server) openSource(ctx context.Context, from streamPos) (*changeSource, error) {
	client := srv.mongo
	ts, skip := from.start()
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetStartAtOperationTime(&ts).
		SetMaxAwaitTime(sourceAwait).SetBatchSize(1000)
	cs, err := client.Database(from.db).Collection(from.coll).Watch(ctx, mongo.Pipeline{}, opts)
	if err != nil {
		return nil, err
	}
	head := from
	if head.snapshot {
		head = allAt(from.db, from.coll, from.ts)
	}
	srv.metrics.streamOpened(1)
	return &changeSource{cs: cs, m: srv.metrics, head: head, skipTS: ts, skip: skip, dirty: map[string]bool{}}, nil
}

// close closes the stream; again does nothing.
func (s *changeSource) close(ctx context.Context) {
	if s.closed {
		return
	}
	s.closed = true
	s.m.streamOpened(-1)
	_ = s.cs.Close(context.WithoutCancel(ctx))
}

// next returns the next change, waiting at most one getMore (sourceAwait) for it: nil and
// no error when none came. A change that carries no message (see above) is returned with
// emit false: it still moves head.
func (s *changeSource) next(ctx context.Context) (ch *change, emit bool, err error) {
	for {
		if !s.cs.TryNext(ctx) {
			if err := s.cs.Err(); err != nil {
				return nil, false, err
			}
			if s.cs.ID() == 0 {
				return nil, false, errCollectionGone
			}
			return nil, false, nil
		}
		ch, emit, err := s.decode(bsoncore.Document(s.cs.Current))
		if err != nil || ch != nil {
			return ch, emit, err
		}
	}
}

// batchDone reports whether the last getMore's changes have all been returned.
func (s *changeSource) batchDone() bool { return s.cs.RemainingBatchLength() == 0 }

// decode turns a change event into a change; nil when it is covered by the start.
func (s *changeSource) decode(ev bsoncore.Document) (*change, bool, error) {
	t, i, ok := ev.Lookup("clusterTime").TimestampOK()
	if !ok {
		return nil, false, errors.New("snapshotapi: a change event without clusterTime")
	}
	ts := bson.Timestamp{T: t, I: i}
	if ts == s.curTS && s.counted {
		s.curN++
	} else {
		s.curTS, s.curN, s.counted = ts, 1, true
	}
	if ts == s.skipTS && s.curN <= s.skip {
		return nil, false, nil // the start position covers it
	}
	pos := streamPos{db: s.head.db, coll: s.head.coll, ts: ts, n: s.curN}
	s.head = pos
	op, _ := ev.Lookup("operationType").StringValueOK()
	ch := &change{pos: pos}
	switch op {
	case "insert", "update", "replace", "delete":
	case "drop", "rename", "dropDatabase", "invalidate":
		return nil, false, errCollectionGone
	default:
		return ch, false, nil
	}
	key, ok := ev.Lookup("documentKey", "_id").StringValueOK()
	if !ok {
		return ch, false, nil // not a view document
	}
	ch.key = key
	full, hasFull := ev.Lookup("fullDocument").DocumentOK()
	switch op {
	case "delete":
		ch.kind = changeRemoved
		delete(s.dirty, key)
		return ch, true, nil
	case "insert", "replace":
		if !hasFull {
			return ch, false, nil
		}
		delete(s.dirty, key)
		if op == "insert" {
			ch.paths = []string{} // there was no document: it matched nothing before
		}
	case "update":
		set, _ := ev.Lookup("updateDescription", "updatedFields").DocumentOK()
		ver, hasV := intValue(set.Lookup("_v"))
		if !hasV {
			return ch, false, nil // the version did not change
		}
		cur, curOK := int64(0), false
		if hasFull {
			cur, curOK = intValue(full.Lookup("_v"))
		}
		if !curOK || cur != ver {
			// A later write moved the document on (or removed it): its change carries it.
			s.dirty[key] = true
			return ch, false, nil
		}
		if !s.dirty[key] {
			ch.paths = changedPaths(ev)
		}
		delete(s.dirty, key)
	}
	v, hasV := intValue(full.Lookup("_v"))
	if !hasV {
		return ch, false, nil // not a view document: no version
	}
	ch.version = v
	if del, _ := full.Lookup("_deleted").BooleanOK(); del {
		ch.kind = changeMarker
		return ch, true, nil
	}
	ch.kind = changeUpsert
	// A copy: full is a slice of the getMore's whole reply, which a change kept in a ring
	// would hold (up to 1,000 events, 16 MiB) and its count of bytes would not show.
	ch.doc = bytes.Clone(full)
	return ch, true, nil
}

// changedPaths lists the fields an update event set, removed or truncated.
func changedPaths(ev bsoncore.Document) []string {
	paths := []string{}
	if set, ok := ev.Lookup("updateDescription", "updatedFields").DocumentOK(); ok {
		if els, err := set.Elements(); err == nil {
			for _, el := range els {
				paths = append(paths, el.Key())
			}
		}
	}
	if rm, ok := ev.Lookup("updateDescription", "removedFields").ArrayOK(); ok {
		if vals, err := rm.Values(); err == nil {
			for _, v := range vals {
				if s, ok := v.StringValueOK(); ok {
					paths = append(paths, s)
				}
			}
		}
	}
	if tr, ok := ev.Lookup("updateDescription", "truncatedArrays").ArrayOK(); ok {
		if vals, err := tr.Values(); err == nil {
			for _, v := range vals {
				if d, ok := v.DocumentOK(); ok {
					if s, ok := d.Lookup("field").StringValueOK(); ok {
						paths = append(paths, s)
					}
				}
			}
		}
	}
	return paths
}
