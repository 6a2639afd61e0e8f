package minimongo

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	defaultFirstBatch = 101
	maxBatchBytes     = 16 * 1024 * 1024
)

// batchLen returns how many of docs fit in one batch: at most n documents and,
// as in MongoDB, no more than 16 MiB (but always at least one document).
func batchLen(docs []bson.D, n int) int {
	if n <= 0 || n > len(docs) {
		n = len(docs)
	}
	size := 0
	for i := 0; i < n; i++ {
		size += docSize(docs[i])
		if size > maxBatchBytes && i > 0 {
			return i
		}
	}
	return n
}

// cursor holds the remaining results of a query, or a change stream.
type cursor struct {
	id        int64
	ns        string
	docs      []bson.D
	stream    *changeStream
	lastUsed  time.Time
	noTimeout bool
	inUse     bool
}

// batchSizeOf reads batchSize from the command (or from its sub-document
// named in), returning -1 when absent.
func batchSizeOf(r *request, in string) int {
	var v any
	var ok bool
	if in == "" {
		v, ok = r.arg("batchSize")
	} else if d, has := r.arg(in); has {
		if dd, isDoc := d.(bson.D); isDoc {
			v, ok = lookupField(dd, "batchSize")
		}
	}
	if !ok {
		return -1
	}
	n, _ := asInt64(v)
	return int(n)
}

func (st *storage) newCursorID() int64 {
	st.nextCur++
	return st.nextCur
}

// cursorReply returns the first batch of docs and registers a cursor for
// the rest.
func (r *request) cursorReply(ns string, docs []bson.D, batchSize int, singleBatch bool) (bson.D, error) {
	if batchSize < 0 {
		batchSize = defaultFirstBatch
	}
	n := 0
	if batchSize > 0 {
		n = batchLen(docs, batchSize)
	}
	first, rest := docs[:n], docs[n:]
	var id int64
	if len(rest) > 0 && !singleBatch {
		id = r.st.newCursorID()
		r.st.cursors[id] = &cursor{id: id, ns: ns, docs: rest, lastUsed: time.Now()}
	}
	return cursorDoc(id, ns, "firstBatch", first, nil), nil
}

func cursorDoc(id int64, ns, batchName string, docs []bson.D, pbrt bson.D) bson.D {
	arr := make(bson.A, len(docs))
	for i, d := range docs {
		arr[i] = d
	}
	cur := bson.D{{Key: batchName, Value: arr}}
	if pbrt != nil {
		cur = append(cur, bson.E{Key: "postBatchResumeToken", Value: pbrt})
	}
	cur = append(cur, bson.E{Key: "id", Value: id}, bson.E{Key: "ns", Value: ns})
	return okReply(bson.E{Key: "cursor", Value: cur})
}

func cmdGetMore(r *request) (bson.D, error) {
	if err := r.checkFields("collection", "batchSize", "maxTimeMS", "term", "lastKnownCommittedOpTime"); err != nil {
		return nil, err
	}
	id, ok := r.cmd[0].Value.(int64)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'", typeName(r.cmd[0].Value))
	}
	collV, _ := r.arg("collection")
	coll, _ := collV.(string)
	cur := r.st.cursors[id]
	if cur == nil || cur.inUse {
		return nil, newErr(codeCursorNotFound, "cursor id %d not found", id)
	}
	if cur.ns != r.db+"."+coll && !(cur.stream != nil && cur.ns == r.db+".$cmd.aggregate" && coll == "$cmd.aggregate") {
		return nil, newErr(13, "Requested getMore on namespace '%s.%s', but cursor belongs to a different namespace %s", r.db, coll, cur.ns)
	}
	if err := r.evalGetMoreFailPoint(id, cur); err != nil {
		return nil, err
	}
	batch := batchSizeOf(r, "")
	cur.lastUsed = time.Now()
	if cur.stream != nil {
		r.streamCursor = true
		var wait time.Duration = time.Second
		if v, ok := r.arg("maxTimeMS"); ok {
			ms, _ := asInt64(v)
			wait = time.Duration(ms) * time.Millisecond
		}
		return r.streamGetMore(cur, batch, wait)
	}
	n := batchLen(cur.docs, batch)
	out := cur.docs[:n]
	cur.docs = cur.docs[n:]
	if len(cur.docs) == 0 {
		delete(r.st.cursors, id)
		id = 0
	}
	return cursorDoc(id, cur.ns, "nextBatch", out, nil), nil
}

func cmdKillCursors(r *request) (bson.D, error) {
	if err := r.checkFields("cursors"); err != nil {
		return nil, err
	}
	ids, _ := r.arg("cursors")
	arr, _ := ids.(bson.A)
	killed, notFound := bson.A{}, bson.A{}
	for _, x := range arr {
		id, _ := x.(int64)
		if c := r.st.cursors[id]; c != nil {
			delete(r.st.cursors, id)
			killed = append(killed, id)
		} else {
			notFound = append(notFound, id)
		}
	}
	return okReply(
		bson.E{Key: "cursorsKilled", Value: killed},
		bson.E{Key: "cursorsNotFound", Value: notFound},
		bson.E{Key: "cursorsAlive", Value: bson.A{}},
		bson.E{Key: "cursorsUnknown", Value: bson.A{}},
	), nil
}

func (st *storage) expireCursors(now time.Time) {
	for id, c := range st.cursors {
		if !c.inUse && !c.noTimeout && now.Sub(c.lastUsed) > st.s.opts.CursorTimeout {
			delete(st.cursors, id)
		}
	}
}
