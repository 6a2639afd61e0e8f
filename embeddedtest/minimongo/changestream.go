package minimongo

import (
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// event is one entry of the oplog from which change streams are served.
type event struct {
	ts        bson.Timestamp
	wall      time.Time
	op        string // insert update replace delete drop dropDatabase rename
	db, coll  string
	toDB      string // rename target
	toColl    string
	docKey    bson.D
	fullDoc   bson.D // inserted/replacement document, or post-image of an update
	preImage  bson.D
	updDesc   bson.D
	images    bool // the collection records pre- and post-images
	lsid      bson.D
	txnNumber *int64
	idx       uint32 // position among the events of one transaction
	// shown to streams with showExpandedEvents only
	uuid   bson.Binary // the collection's UUID (collectionUUID)
	opDesc bson.D      // operationDescription of DDL events and renames
	disamb bson.D      // updateDescription.disambiguatedPaths
}

// expandedOps are the DDL events only streams opened with showExpandedEvents see.
var expandedOps = map[string]bool{"create": true, "createIndexes": true, "dropIndexes": true, "modify": true}

// pos is a position in the oplog: a cluster time and an index within the
// events sharing it (the operations of one transaction share a cluster time).
type pos struct {
	ts  bson.Timestamp
	idx uint32
}

const maxIdx = ^uint32(0)

func (e *event) pos() pos { return pos{ts: e.ts, idx: e.idx} }

func posLess(a, b pos) bool {
	if a.ts != b.ts {
		return tsLess(a.ts, b.ts)
	}
	return a.idx < b.idx
}

// prevPos returns the greatest position before p.
func prevPos(p pos) pos {
	switch {
	case p.idx > 0:
		return pos{ts: p.ts, idx: p.idx - 1}
	case p.ts.I > 0:
		return pos{ts: bson.Timestamp{T: p.ts.T, I: p.ts.I - 1}, idx: maxIdx}
	case p.ts.T > 0:
		return pos{ts: bson.Timestamp{T: p.ts.T - 1, I: ^uint32(0)}, idx: maxIdx}
	}
	return p
}

// Resume token kinds, ordered after the cluster time in the token.
const (
	tokEvent      = 0
	tokInvalidate = 1
	tokHighWater  = 2
)

// appendEvent records an event with a new cluster time and wakes waiting
// change streams.
func (st *storage) appendEvent(ev *event) { st.appendEvents([]*event{ev}) }

// appendEvents records events sharing one cluster time, in order.
func (st *storage) appendEvents(evs []*event) {
	if len(evs) == 0 {
		return
	}
	ts, now := st.nextTS(), time.Now()
	for i, ev := range evs {
		ev.ts, ev.idx, ev.wall = ts, uint32(i), now
	}
	st.oplog = append(st.oplog, evs...)
	if max := st.s.opts.OplogSize; len(st.oplog) > max {
		drop := len(st.oplog) - max
		st.lost, st.lostPos = true, st.oplog[drop-1].pos()
		for i := 0; i < drop; i++ {
			st.oplog[i] = nil
		}
		st.oplog = st.oplog[drop:]
		if cap(st.oplog) > 4*max+1024 {
			st.oplog = append([]*event(nil), st.oplog...)
		}
	}
	if st.waiting > 0 {
		close(st.notify)
		st.notify = make(chan struct{})
	}
}

func makeToken(p pos, kind byte) bson.D {
	var b [14]byte
	b[0] = 0x82
	binary.BigEndian.PutUint32(b[1:], p.ts.T)
	binary.BigEndian.PutUint32(b[5:], p.ts.I)
	binary.BigEndian.PutUint32(b[9:], p.idx)
	b[13] = kind
	return bson.D{{Key: "_data", Value: strings.ToUpper(hex.EncodeToString(b[:]))}}
}

func parseToken(v any) (pos, byte, error) {
	d, ok := v.(bson.D)
	bad := newErr(codeInvalidResumeToken, "Invalid resume token: %s", formatValue(v))
	if !ok {
		return pos{}, 0, bad
	}
	data, _ := lookupField(d, "_data")
	s, ok := data.(string)
	if !ok {
		return pos{}, 0, bad
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 14 || b[0] != 0x82 || b[13] > tokHighWater {
		return pos{}, 0, bad
	}
	ts := bson.Timestamp{T: binary.BigEndian.Uint32(b[1:]), I: binary.BigEndian.Uint32(b[5:])}
	return pos{ts: ts, idx: binary.BigEndian.Uint32(b[9:])}, b[13], nil
}

func tsLess(a, b bson.Timestamp) bool { return a.T < b.T || (a.T == b.T && a.I < b.I) }

// changeStream is the state of a change stream cursor.
type changeStream struct {
	db, coll     string // coll "" watches a database; db "" the whole deployment
	after        pos
	inclusive    bool // deliver the event at exactly after (startAtOperationTime)
	fullDoc      string
	fullDocPre   string
	stages       []*stage
	invalidated  bool
	pendingInval *bson.D
	done         bool
	expanded     bool // showExpandedEvents
}

func (cs *changeStream) watches(ev *event) bool {
	if expandedOps[ev.op] && !cs.expanded {
		return false
	}
	switch {
	case cs.db == "":
		return ev.db != "admin" && ev.db != "config" && ev.db != "local"
	case cs.coll == "":
		return ev.db == cs.db
	}
	return ev.db == cs.db && ev.coll == cs.coll || ev.op == "rename" && ev.toDB == cs.db && ev.toColl == cs.coll
}

// invalidates reports whether ev ends the stream.
func (cs *changeStream) invalidates(ev *event) bool {
	switch {
	case cs.db == "":
		return false
	case cs.coll == "":
		return ev.op == "dropDatabase" && ev.db == cs.db
	}
	return (ev.op == "drop" || ev.op == "rename") && cs.watches(ev)
}

var streamStages = map[string]bool{
	"$match": true, "$project": true, "$addFields": true, "$set": true, "$unset": true,
	"$replaceRoot": true, "$replaceWith": true,
}

// openChangeStream handles an aggregate whose first stage is $changeStream.
func (r *request) openChangeStream(collName string, spec any, rest bson.A) (bson.D, error) {
	if r.tx != nil {
		return nil, newErr(codeOperationNotSupportedInTx, "Cannot run aggregate with $changeStream in a multi-document transaction.")
	}
	opts, ok := spec.(bson.D)
	if !ok {
		return nil, newErr(50808, "$changeStream stage expects a document as argument")
	}
	cs := &changeStream{db: r.db, coll: collName, fullDoc: "default", fullDocPre: "off"}
	var resume, startAfter any
	var startAt *bson.Timestamp
	allCluster := false
	for _, e := range opts {
		switch e.Key {
		case "fullDocument":
			s, _ := e.Value.(string)
			switch s {
			case "default", "updateLookup", "whenAvailable", "required":
				cs.fullDoc = s
			default:
				return nil, errBadValue("'" + formatValue(e.Value) + "' is not a valid value for $changeStream.fullDocument")
			}
		case "fullDocumentBeforeChange":
			s, _ := e.Value.(string)
			switch s {
			case "off", "whenAvailable", "required":
				cs.fullDocPre = s
			default:
				return nil, errBadValue("'" + formatValue(e.Value) + "' is not a valid value for $changeStream.fullDocumentBeforeChange")
			}
		case "resumeAfter":
			resume = e.Value
		case "startAfter":
			startAfter = e.Value
		case "startAtOperationTime":
			ts, ok := e.Value.(bson.Timestamp)
			if !ok {
				return nil, newErr(codeTypeMismatch, "BSON field '$changeStream.startAtOperationTime' is the wrong type '%s', expected type 'timestamp'", typeName(e.Value))
			}
			startAt = &ts
		case "allChangesForCluster":
			allCluster = truthy(e.Value)
		case "showExpandedEvents":
			b, ok := e.Value.(bool)
			if !ok {
				return nil, newErr(codeTypeMismatch, "BSON field '$changeStream.showExpandedEvents' is the wrong type '%s', expected type 'bool'", typeName(e.Value))
			}
			cs.expanded = b
		default:
			return nil, newErr(codeUnknownField, "BSON field '$changeStream.%s' is an unknown field.", e.Key)
		}
	}
	n := 0
	for _, x := range []bool{resume != nil, startAfter != nil, startAt != nil} {
		if x {
			n++
		}
	}
	if n > 1 {
		return nil, newErr(50865, "Only one type of resume option is allowed, but multiple were found.")
	}
	if allCluster {
		if r.db != "admin" || collName != "" {
			return nil, newErr(codeInvalidOptions, "$changeStream may not be opened on the internal admin database unless allChangesForCluster is set and the aggregate is run on the admin database with {aggregate: 1}")
		}
		cs.db = ""
	} else if r.db == "admin" || r.db == "config" || r.db == "local" {
		return nil, newErr(codeInvalidNamespace, "$changeStream may not be opened on the internal %s database", r.db)
	}
	cs.after = pos{ts: r.st.clusterTime(), idx: maxIdx}
	switch {
	case resume != nil || startAfter != nil:
		tok := resume
		if tok == nil {
			tok = startAfter
		}
		p, kind, err := parseToken(tok)
		if err != nil {
			return nil, err
		}
		if kind == tokInvalidate && resume != nil {
			return nil, newErr(codeInvalidResumeToken, "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification.")
		}
		if r.st.lost && !posLess(r.st.lostPos, p) {
			return nil, historyLost()
		}
		cs.after = p
	case startAt != nil:
		p := pos{ts: *startAt}
		if r.st.lost && !posLess(r.st.lostPos, p) {
			return nil, historyLost()
		}
		cs.after, cs.inclusive = p, true
	}
	for _, raw := range rest {
		st, err := parseStage(raw, nil)
		if err != nil {
			return nil, err
		}
		if !streamStages[st.name] {
			return nil, newErr(codeIllegalOperation, "%s is not permitted in a $changeStream pipeline", st.name)
		}
		cs.stages = append(cs.stages, st)
	}
	ns := r.db + "." + collName
	if collName == "" {
		ns = r.db + ".$cmd.aggregate"
	}
	batch := batchSizeOf(r, "cursor")
	docs, pbrt, err := r.st.collectEvents(cs, batch)
	if err != nil {
		return nil, err
	}
	id := r.st.newCursorID()
	cur := &cursor{id: id, ns: ns, stream: cs, lastUsed: time.Now()}
	if cs.done {
		id = 0
	} else {
		r.st.cursors[id] = cur
	}
	return cursorDoc(id, ns, "firstBatch", docs, pbrt), nil
}

func historyLost() error {
	return newErr(codeChangeStreamHistoryLost, "Resume of change stream was not possible, as the resume point may no longer be in the oplog.")
}

// streamGetMore returns the next events of a change stream, waiting up to
// wait for new ones.
func (r *request) streamGetMore(cur *cursor, batch int, wait time.Duration) (bson.D, error) {
	st := r.st
	cs := cur.stream
	deadline := time.Now().Add(wait)
	for {
		docs, pbrt, err := st.collectEvents(cs, batch)
		if err != nil {
			delete(st.cursors, cur.id)
			return nil, err
		}
		remaining := time.Until(deadline)
		if len(docs) > 0 || cs.done || remaining <= 0 {
			id := cur.id
			if cs.done {
				delete(st.cursors, cur.id)
				id = 0
			}
			cur.lastUsed = time.Now()
			return cursorDoc(id, cur.ns, "nextBatch", docs, pbrt), nil
		}
		ch := st.notify
		cur.inUse = true
		st.waiting++
		r.s.mu.Unlock()
		t := time.NewTimer(remaining)
		var closing bool
		select {
		case <-ch:
		case <-t.C:
		case <-r.s.closing:
			closing = true
		}
		t.Stop()
		r.s.mu.Lock()
		st.waiting--
		cur.inUse = false
		if closing || r.s.closed {
			return nil, newErr(codeInterruptedAtShutdown, "interrupted at shutdown")
		}
		if st.cursors[cur.id] != cur {
			return nil, newErr(codeCursorNotFound, "cursor id %d not found", cur.id)
		}
	}
}

// collectEvents renders up to batch events after the stream's position.
func (st *storage) collectEvents(cs *changeStream, batch int) ([]bson.D, bson.D, error) {
	if st.lost && ((!cs.inclusive && posLess(cs.after, st.lostPos)) || (cs.inclusive && !posLess(st.lostPos, cs.after))) {
		return nil, nil, historyLost()
	}
	var out []bson.D
	if batch <= 0 {
		batch = 1 << 30
	}
	if cs.pendingInval != nil {
		tok := *cs.pendingInval
		cs.pendingInval = nil
		cs.done = true
		return []bson.D{{{Key: "_id", Value: tok}, {Key: "operationType", Value: "invalidate"}, {Key: "clusterTime", Value: cs.after.ts}, {Key: "wallTime", Value: bson.NewDateTimeFromTime(time.Now())}}}, tok, nil
	}
	i := sort.Search(len(st.oplog), func(i int) bool {
		p := st.oplog[i].pos()
		if cs.inclusive {
			return !posLess(p, cs.after)
		}
		return posLess(cs.after, p)
	})
	var lastTok bson.D
	for ; i < len(st.oplog) && len(out) < batch; i++ {
		ev := st.oplog[i]
		cs.after, cs.inclusive = ev.pos(), false
		if !cs.watches(ev) {
			continue
		}
		doc, err := st.renderEvent(cs, ev)
		if err != nil {
			return nil, nil, err
		}
		tok := makeToken(ev.pos(), tokEvent)
		docs, err := runStages([]bson.D{doc}, cs.stages)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range docs {
			if id, _ := lookupField(d, "_id"); !valuesEqual(id, tok) {
				return nil, nil, newErr(280, "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed.")
			}
			out = append(out, d)
			lastTok = tok
		}
		if cs.invalidates(ev) {
			inv := makeToken(ev.pos(), tokInvalidate)
			if len(out) < batch {
				cs.done = true
				out = append(out, bson.D{{Key: "_id", Value: inv}, {Key: "operationType", Value: "invalidate"}, {Key: "clusterTime", Value: ev.ts}, {Key: "wallTime", Value: bson.NewDateTimeFromTime(ev.wall)}})
				return out, inv, nil
			}
			cs.pendingInval = &inv
			return out, lastTok, nil
		}
	}
	if i >= len(st.oplog) {
		hw := pos{ts: st.clusterTime(), idx: maxIdx}
		if cs.inclusive {
			return out, makeToken(prevPos(cs.after), tokHighWater), nil
		}
		if posLess(cs.after, hw) {
			cs.after = hw
		}
		return out, makeToken(hw, tokHighWater), nil
	}
	return out, lastTok, nil
}

func (st *storage) renderEvent(cs *changeStream, ev *event) (bson.D, error) {
	d := bson.D{
		{Key: "_id", Value: makeToken(ev.pos(), tokEvent)},
		{Key: "operationType", Value: ev.op},
		{Key: "clusterTime", Value: ev.ts},
		{Key: "wallTime", Value: bson.NewDateTimeFromTime(ev.wall)},
	}
	switch ev.op {
	case "insert", "replace":
		d = append(d, bson.E{Key: "fullDocument", Value: ev.fullDoc})
	case "update":
		switch cs.fullDoc {
		case "updateLookup":
			var cur any
			if c := st.getColl(ev.db, ev.coll); c != nil {
				id, _ := lookupField(ev.docKey, "_id")
				if doc := (view{st: st}).get(c, idKey(id)); doc != nil {
					cur = doc
				}
			}
			d = append(d, bson.E{Key: "fullDocument", Value: cur})
		case "whenAvailable", "required":
			if ev.images {
				d = append(d, bson.E{Key: "fullDocument", Value: ev.fullDoc})
			} else if cs.fullDoc == "required" {
				return nil, newErr(codeNoMatchingDocument, "Change stream was configured to require a post-image for all update, delete and replace events, but the post-image was not found for event: %s", formatValue(ev.docKey))
			} else {
				d = append(d, bson.E{Key: "fullDocument", Value: nil})
			}
		}
	}
	switch ev.op {
	case "drop":
		d = append(d, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: ev.db}, {Key: "coll", Value: ev.coll}}})
	case "dropDatabase":
		d = append(d, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: ev.db}}})
	case "rename":
		d = append(d, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: ev.db}, {Key: "coll", Value: ev.coll}}},
			bson.E{Key: "to", Value: bson.D{{Key: "db", Value: ev.toDB}, {Key: "coll", Value: ev.toColl}}})
	case "create", "createIndexes", "dropIndexes", "modify":
		d = append(d, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: ev.db}, {Key: "coll", Value: ev.coll}}})
	default:
		d = append(d, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: ev.db}, {Key: "coll", Value: ev.coll}}})
		d = append(d, bson.E{Key: "documentKey", Value: ev.docKey})
	}
	if ev.op == "update" {
		ud := ev.updDesc
		if cs.expanded {
			dis := ev.disamb
			if dis == nil {
				dis = bson.D{}
			}
			ud = append(append(bson.D{}, ud...), bson.E{Key: "disambiguatedPaths", Value: dis})
		}
		d = append(d, bson.E{Key: "updateDescription", Value: ud})
	}
	if cs.expanded {
		if ev.uuid.Data != nil {
			d = append(d, bson.E{Key: "collectionUUID", Value: ev.uuid})
		}
		if ev.opDesc != nil {
			d = append(d, bson.E{Key: "operationDescription", Value: ev.opDesc})
		}
	}
	if cs.fullDocPre != "off" && (ev.op == "update" || ev.op == "replace" || ev.op == "delete") {
		if ev.images {
			d = append(d, bson.E{Key: "fullDocumentBeforeChange", Value: ev.preImage})
		} else if cs.fullDocPre == "required" {
			return nil, newErr(codeNoMatchingDocument, "Change stream was configured to require a pre-image for all update, delete and replace events, but the pre-image was not found for event: %s", formatValue(ev.docKey))
		} else {
			d = append(d, bson.E{Key: "fullDocumentBeforeChange", Value: nil})
		}
	}
	if ev.txnNumber != nil {
		d = append(d, bson.E{Key: "lsid", Value: ev.lsid}, bson.E{Key: "txnNumber", Value: *ev.txnNumber})
	}
	return d, nil
}

// updateDescription describes the difference between two versions of a
// document the way change streams report updates (MongoDB's document diff):
// changed subdocuments and arrays are described field by field and element by
// element, a shortened array as a truncatedArrays entry. It also returns the
// disambiguatedPaths of the paths that name numeric or dotted fields.
func updateDescription(old, new bson.D) (bson.D, bson.D) {
	upd := bson.D{}
	removed := bson.A{}
	trunc := bson.A{}
	dis := bson.D{}
	note := func(path string, comps []any) {
		ambiguous := false
		for _, c := range comps {
			if s, ok := c.(string); ok && (strings.Contains(s, ".") || isDigits(s)) {
				ambiguous = true
			}
		}
		if ambiguous {
			dis = append(dis, bson.E{Key: path, Value: bson.A(append([]any(nil), comps...))})
		}
	}
	with := func(comps []any, c any) []any { return append(append([]any(nil), comps...), c) }
	var diffDoc func(prefix string, comps []any, o, n bson.D)
	var diffVal func(path string, comps []any, ov, nv any)
	diffVal = func(path string, comps []any, ov, nv any) {
		od, ok1 := ov.(bson.D)
		nd, ok2 := nv.(bson.D)
		if ok1 && ok2 {
			diffDoc(path+".", comps, od, nd)
			return
		}
		oa, ok1 := ov.(bson.A)
		na, ok2 := nv.(bson.A)
		if !ok1 || !ok2 {
			upd = append(upd, bson.E{Key: path, Value: nv})
			note(path, comps)
			return
		}
		for i := range na {
			p := path + "." + itoa(int64(i))
			c := with(comps, int32(i))
			switch {
			case i >= len(oa):
				upd = append(upd, bson.E{Key: p, Value: na[i]})
				note(p, c)
			case !sameValue(oa[i], na[i]):
				diffVal(p, c, oa[i], na[i])
			}
		}
		if len(na) < len(oa) {
			trunc = append(trunc, bson.D{{Key: "field", Value: path}, {Key: "newSize", Value: int32(len(na))}})
		}
	}
	diffDoc = func(prefix string, comps []any, o, n bson.D) {
		for _, e := range n {
			path := prefix + e.Key
			ov, ok := lookupField(o, e.Key)
			switch {
			case !ok:
				upd = append(upd, bson.E{Key: path, Value: e.Value})
				note(path, with(comps, e.Key))
			case sameValue(ov, e.Value):
			default:
				diffVal(path, with(comps, e.Key), ov, e.Value)
			}
		}
		for _, e := range o {
			if _, ok := lookupField(n, e.Key); !ok {
				removed = append(removed, prefix+e.Key)
				note(prefix+e.Key, with(comps, e.Key))
			}
		}
	}
	diffDoc("", nil, old, new)
	return bson.D{{Key: "updatedFields", Value: upd}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: trunc}}, dis
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func sameValue(a, b any) bool { return identical(a, b) }
