package minimongo

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Persistence (Options.Dir). The committed state is written to one file, Dir/state.bson, as
// a sequence of BSON documents:
//
//	{format: "minimongo-state", version: 1, clean, clusterTime, lost, lostPos: {ts, idx}, savedAt}
//	{collection: {db, name, uuid, changeStreamPreAndPostImages, validator, validationLevel,
//	              validationAction, indexes: [spec, ...]}}
//	{document: {...}}                 the collection's documents in natural order
//	... more collections ...
//	{event: {ts, idx, wall, op, ...}} the oplog, oldest first
//	{end: {records, crc32c}}          records before it and the CRC-32C of their bytes
//
// A write goes to a temporary file in Dir that is synced and renamed over state.bson, so the
// file is always a complete snapshot. Only what the server could not rebuild is stored: index
// entries are rebuilt on load by the code that builds them for createIndexes.

const (
	stateFileName = "state.bson"
	stateFormat   = "minimongo-state"
	stateVersion  = 1
	// maxStateRecord bounds one record: an event can carry a document, its pre-image and an
	// update description of up to 16 MiB each.
	maxStateRecord = 64 << 20
	// defaultSnapshotInterval is Options.SnapshotInterval's default.
	defaultSnapshotInterval = 5 * time.Second
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// persister is the persistence state of a Server with Options.Dir.
type persister struct {
	path string
	// guarded by Server.mu
	savedVer uint64         // storage version of the last snapshot taken
	savedTS  bson.Timestamp // cluster time of the last snapshot taken
	ddl      bool           // collections, indexes or options changed since then
	failed   bool           // the last write failed and is retried
	noFinal  bool           // Close skips the final write (tests simulate a crash)
	doneVer  uint64         // storage version of the last snapshot written
	doneTS   bson.Timestamp // cluster time of the last snapshot written
	writes   atomic.Int64   // snapshots written
}

// ddlCommands change collections, indexes or collection options without advancing the
// storage version; the snapshot loop learns of them from Server.handle.
var ddlCommands = map[string]bool{
	"create": true, "createIndexes": true, "dropIndexes": true, "deleteIndexes": true, "collMod": true,
}

// dirty reports whether the state changed since the last snapshot.
func (p *persister) dirty(st *storage) bool {
	return p.ddl || p.failed || st.ver != p.savedVer || st.lastTS != p.savedTS
}

// snapshot is the committed state captured under the lock, encoded after it is released:
// documents, index specs, validators and events are never mutated once stored.
type snapshot struct {
	clusterTime bson.Timestamp
	lost        bool
	lostPos     pos
	colls       []snapColl
	oplog       []*event
}

type snapColl struct {
	db, name string
	uuid     bson.Binary
	images   bool
	val      *validation
	specs    []bson.D
	docs     []bson.D
}

// capture takes a snapshot of the committed state. Open transactions, including the
// collections they created, are not part of it.
func (st *storage) capture() *snapshot {
	sn := &snapshot{clusterTime: st.lastTS, lost: st.lost, lostPos: st.lostPos}
	for _, dn := range st.sortedDBNames() {
		d := st.dbs[dn]
		for _, cn := range d.sortedCollNames() {
			c := d.colls[cn]
			sc := snapColl{db: c.db, name: c.name, uuid: c.uuid, images: c.prePostImages, val: c.validation}
			for _, ix := range c.indexes {
				if ix.name != "_id_" {
					sc.specs = append(sc.specs, ix.spec)
				}
			}
			all := (view{st: st}).all(c)
			sc.docs = make([]bson.D, len(all))
			for i, kd := range all {
				sc.docs[i] = kd.doc
			}
			sn.colls = append(sn.colls, sc)
		}
	}
	sn.oplog = append([]*event(nil), st.oplog...)
	return sn
}

// snapshotLoop writes the state every SnapshotInterval when it changed.
func (s *Server) snapshotLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			if err := s.writeSnapshot(false); err != nil {
				s.log.Warn("minimongo: writing state failed; retrying", "dir", s.opts.Dir, "err", err)
			}
		}
	}
}

// writeSnapshot captures the state and writes it to the state file. Only the snapshot loop
// and, once it has stopped, Close call it, so writes never overlap.
func (s *Server) writeSnapshot(final bool) error {
	p := s.persist
	s.mu.Lock()
	if !final && !p.dirty(s.st) {
		s.mu.Unlock()
		return nil
	}
	sn := s.st.capture()
	ver, ts := s.st.ver, s.st.lastTS
	p.savedVer, p.savedTS, p.ddl, p.failed = ver, ts, false, false
	s.mu.Unlock()
	err := writeStateFile(p.path, sn, final)
	s.mu.Lock()
	if err != nil {
		p.failed = true
	} else {
		p.doneVer, p.doneTS = ver, ts
	}
	s.mu.Unlock()
	if err == nil {
		p.writes.Add(1)
	}
	return err
}

// recordWriter appends BSON records to a file, counting them and their CRC.
type recordWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	n   int64
	buf []byte
	err error
}

func (rw *recordWriter) put(rec bson.D) {
	if rw.err != nil {
		return
	}
	rw.buf, rw.err = encodeDoc(rw.buf[:0], rec)
	if rw.err != nil {
		return
	}
	_, _ = rw.crc.Write(rw.buf)
	_, rw.err = rw.w.Write(rw.buf)
	rw.n++
}

func writeStateFile(path string, sn *snapshot, clean bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".state-*.tmp")
	if err != nil {
		return fmt.Errorf("minimongo: writing state: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("minimongo: writing state to %s: %w", path, err)
		}
	}()
	rw := &recordWriter{w: bufio.NewWriterSize(f, 1<<20), crc: crc32.New(crcTable)}
	rw.put(bson.D{
		{Key: "format", Value: stateFormat},
		{Key: "version", Value: int32(stateVersion)},
		{Key: "clean", Value: clean},
		{Key: "clusterTime", Value: sn.clusterTime},
		{Key: "lost", Value: sn.lost},
		{Key: "lostPos", Value: bson.D{{Key: "ts", Value: sn.lostPos.ts}, {Key: "idx", Value: int64(sn.lostPos.idx)}}},
		{Key: "savedAt", Value: bson.NewDateTimeFromTime(time.Now())},
	})
	for _, c := range sn.colls {
		rw.put(bson.D{{Key: "collection", Value: encodeColl(c)}})
		for _, doc := range c.docs {
			rw.put(bson.D{{Key: "document", Value: doc}})
		}
	}
	for _, ev := range sn.oplog {
		rw.put(bson.D{{Key: "event", Value: encodeEvent(ev)}})
	}
	if rw.err != nil {
		return rw.err
	}
	end, err := encodeDoc(nil, bson.D{{Key: "end", Value: bson.D{
		{Key: "records", Value: rw.n},
		{Key: "crc32c", Value: int64(rw.crc.Sum32())},
	}}})
	if err != nil {
		return err
	}
	if _, err := rw.w.Write(end); err != nil {
		return err
	}
	if err := rw.w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// make the rename durable; not every platform can sync a directory
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func encodeColl(c snapColl) bson.D {
	out := bson.D{
		{Key: "db", Value: c.db},
		{Key: "name", Value: c.name},
		{Key: "uuid", Value: c.uuid},
		{Key: "changeStreamPreAndPostImages", Value: c.images},
	}
	if v := c.val; v != nil {
		if v.validator != nil {
			out = append(out, bson.E{Key: "validator", Value: v.validator})
		}
		out = append(out, bson.E{Key: "validationLevel", Value: v.level}, bson.E{Key: "validationAction", Value: v.action})
	}
	specs := make(bson.A, len(c.specs))
	for i, s := range c.specs {
		specs[i] = s
	}
	return append(out, bson.E{Key: "indexes", Value: specs})
}

// encodeEvent stores every field renderEvent reads; absent documents are left out.
func encodeEvent(ev *event) bson.D {
	out := bson.D{
		{Key: "ts", Value: ev.ts},
		{Key: "idx", Value: int64(ev.idx)},
		{Key: "wall", Value: bson.NewDateTimeFromTime(ev.wall)},
		{Key: "op", Value: ev.op},
		{Key: "db", Value: ev.db},
		{Key: "coll", Value: ev.coll},
		{Key: "images", Value: ev.images},
	}
	if ev.op == "rename" {
		out = append(out, bson.E{Key: "toDB", Value: ev.toDB}, bson.E{Key: "toColl", Value: ev.toColl})
	}
	for _, f := range []struct {
		key string
		doc bson.D
	}{{"docKey", ev.docKey}, {"fullDoc", ev.fullDoc}, {"preImage", ev.preImage}, {"updDesc", ev.updDesc}, {"lsid", ev.lsid},
		{"opDesc", ev.opDesc}, {"disamb", ev.disamb}} {
		if f.doc != nil {
			out = append(out, bson.E{Key: f.key, Value: f.doc})
		}
	}
	if ev.txnNumber != nil {
		out = append(out, bson.E{Key: "txnNumber", Value: *ev.txnNumber})
	}
	if ev.uuid.Data != nil {
		out = append(out, bson.E{Key: "uuid", Value: ev.uuid})
	}
	return out
}

// errCorrupt is the error of a state file that cannot be read.
func errCorrupt(path, format string, args ...any) error {
	return fmt.Errorf("minimongo: state file %s is corrupt (%s); move it away to start with an empty server", path, fmt.Sprintf(format, args...))
}

// recordReader reads the records of a state file.
type recordReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	n   int64
	buf []byte
}

// next returns the next record, io.EOF at a clean end of the file and io.ErrUnexpectedEOF
// within a record.
func (rr *recordReader) next() (bson.D, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(rr.r, hdr[:]); err != nil {
		return nil, nil, err
	}
	size := int32(binary.LittleEndian.Uint32(hdr[:]))
	if size < 5 || size > maxStateRecord {
		return nil, nil, fmt.Errorf("record %d has an invalid length %d", rr.n+1, size)
	}
	if cap(rr.buf) < int(size) {
		rr.buf = make([]byte, size)
	}
	raw := rr.buf[:size]
	copy(raw, hdr[:])
	if _, err := io.ReadFull(rr.r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	if err := bsoncore.Document(raw).Validate(); err != nil {
		return nil, nil, fmt.Errorf("record %d: %v", rr.n+1, err)
	}
	rec, err := decodeDoc(raw)
	if err != nil || len(rec) == 0 {
		return nil, nil, fmt.Errorf("record %d: invalid document", rr.n+1)
	}
	rr.n++
	return rec, raw, nil
}

// loadState restores the state saved in path, if the file exists. It runs in Start, before
// the server accepts connections.
func (st *storage) loadState(path string, oplogSize int) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("minimongo: reading state: %w", err)
	}
	defer f.Close()
	rr := &recordReader{r: bufio.NewReaderSize(f, 1<<20), crc: crc32.New(crcTable)}
	corrupt := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errCorrupt(path, "truncated after %d records", rr.n)
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("minimongo: reading state: %w", err)
		}
		return errCorrupt(path, "%v", err)
	}

	head, raw, err := rr.next()
	if err != nil {
		return corrupt(err)
	}
	if format, _ := lookupField(head, "format"); format != stateFormat {
		return fmt.Errorf("minimongo: %s is not a minimongo state file", path)
	}
	version, _ := lookupField(head, "version")
	if v, ok := asInt64(version); !ok || v != stateVersion {
		return fmt.Errorf("minimongo: state file %s has format version %s; this minimongo reads version %d only (move the file away to start with an empty server)", path, formatValue(version), stateVersion)
	}
	_, _ = rr.crc.Write(raw)
	hs := fields(head)
	clusterTime, _ := hs.value("clusterTime").(bson.Timestamp)
	lostPos := hs.doc("lostPos")
	ps := fields(lostPos)
	lostTS, _ := ps.value("ts").(bson.Timestamp)
	lostIdx, _ := asInt64(ps.value("idx"))
	st.lost, st.lostPos = truthy(hs.value("lost")), pos{ts: lostTS, idx: uint32(lostIdx)}
	if hs.err != nil || ps.err != nil {
		return corrupt(errors.Join(hs.err, ps.err))
	}

	var (
		cur      *collection
		specs    bson.A
		oplog    []*event
		finished bool
	)
	// indexes are built once all documents of their collection are in, as createIndexes
	// builds them on a filled collection
	buildIndexes := func() error {
		if cur == nil {
			return nil
		}
		for _, x := range specs {
			spec, ok := x.(bson.D)
			if !ok {
				return fmt.Errorf("collection %s: index spec %s is not a document", cur.ns(), formatValue(x))
			}
			ix, err := parseIndexSpec(spec)
			if err != nil {
				return fmt.Errorf("collection %s: index %s: %v", cur.ns(), formatValue(spec), err)
			}
			if err := st.buildIndex(cur, ix); err != nil {
				return fmt.Errorf("collection %s: index %s: %v", cur.ns(), ix.name, err)
			}
			cur.indexes = append(cur.indexes, ix)
		}
		cur, specs = nil, nil
		return nil
	}
	for !finished {
		rec, raw, err := rr.next()
		if err != nil {
			return corrupt(err)
		}
		kind, body := rec[0].Key, rec[0].Value
		if kind != "end" {
			_, _ = rr.crc.Write(raw)
		}
		switch kind {
		case "collection":
			if err := buildIndexes(); err != nil {
				return corrupt(err)
			}
			if len(oplog) > 0 {
				return corrupt(fmt.Errorf("record %d: a collection after the oplog", rr.n))
			}
			if cur, specs, err = st.loadColl(body); err != nil {
				return corrupt(fmt.Errorf("record %d: %v", rr.n, err))
			}
		case "document":
			doc, ok := body.(bson.D)
			if cur == nil || !ok {
				return corrupt(fmt.Errorf("record %d: a document outside a collection", rr.n))
			}
			id, ok := lookupField(doc, "_id")
			if !ok {
				return corrupt(fmt.Errorf("record %d: a document of %s without _id", rr.n, cur.ns()))
			}
			key := idKey(id)
			if cur.docs[key] != nil {
				return corrupt(fmt.Errorf("record %d: duplicate _id %s in %s", rr.n, formatValue(id), cur.ns()))
			}
			st.commitWrite(cur, key, doc, 0)
		case "event":
			if err := buildIndexes(); err != nil {
				return corrupt(err)
			}
			ev, err := decodeEvent(body)
			if err != nil {
				return corrupt(fmt.Errorf("record %d: %v", rr.n, err))
			}
			if n := len(oplog); n > 0 && !posLess(oplog[n-1].pos(), ev.pos()) {
				return corrupt(fmt.Errorf("record %d: the oplog is out of order", rr.n))
			}
			oplog = append(oplog, ev)
		case "end":
			if err := buildIndexes(); err != nil {
				return corrupt(err)
			}
			es := fields(bodyDoc(body))
			records, _ := asInt64(es.value("records"))
			sum, _ := asInt64(es.value("crc32c"))
			if es.err != nil || records != rr.n-1 {
				return corrupt(fmt.Errorf("the end record counts %d records, the file has %d", records, rr.n-1))
			}
			if uint32(sum) != rr.crc.Sum32() || sum>>32 != 0 {
				return corrupt(fmt.Errorf("checksum mismatch"))
			}
			finished = true
		default:
			return corrupt(fmt.Errorf("record %d: unknown record %q", rr.n, kind))
		}
	}
	if _, _, err := rr.next(); err != io.EOF {
		return corrupt(fmt.Errorf("data after the end record"))
	}

	if drop := len(oplog) - oplogSize; drop > 0 {
		st.lost, st.lostPos = true, oplog[drop-1].pos()
		oplog = append([]*event(nil), oplog[drop:]...)
	}
	st.oplog = oplog
	if n := len(oplog); n > 0 && tsLess(clusterTime, oplog[n-1].ts) {
		return corrupt(fmt.Errorf("the cluster time is older than the oplog"))
	}
	st.lastTS = clusterTime
	if !truthy(hs.value("clean")) {
		// The server stopped without its final write: it may have handed out cluster
		// times and resume tokens after this snapshot, all at most the current second.
		// Later ones must sort after them.
		t := uint32(time.Now().Unix())
		if t < clusterTime.T {
			t = clusterTime.T
		}
		st.lastTS = bson.Timestamp{T: t + 1}
	}
	return nil
}

// loadColl installs the collection described by a collection record and returns it with
// its index specs, which are built once its documents are loaded.
func (st *storage) loadColl(v any) (*collection, bson.A, error) {
	cs := fields(bodyDoc(v))
	db, _ := cs.value("db").(string)
	name, _ := cs.value("name").(string)
	uuid, _ := cs.value("uuid").(bson.Binary)
	specs, _ := cs.value("indexes").(bson.A)
	if cs.err != nil {
		return nil, nil, cs.err
	}
	if uuid.Subtype != 4 || len(uuid.Data) != 16 {
		return nil, nil, fmt.Errorf("collection %s.%s has no UUID", db, name)
	}
	if validDBName(db) != nil || validCollName(db, name) != nil {
		return nil, nil, fmt.Errorf("invalid namespace %q.%q", db, name)
	}
	if st.getColl(db, name) != nil {
		return nil, nil, fmt.Errorf("collection %s.%s appears twice", db, name)
	}
	c := newCollection(db, name)
	c.uuid = uuid
	c.prePostImages = truthy(cs.value("changeStreamPreAndPostImages"))
	level, _ := cs.value("validationLevel").(string)
	action, _ := cs.value("validationAction").(string)
	validator, hasValidator := cs.value("validator").(bson.D)
	if hasValidator || level != "" || action != "" {
		val := &validation{level: level, action: action}
		if hasValidator {
			m, err := compileValidator(validator)
			if err != nil {
				return nil, nil, fmt.Errorf("collection %s: validator: %v", c.ns(), err)
			}
			val.validator, val.match = validator, m
		}
		c.validation = val
	}
	st.installColl(c)
	return c, specs, nil
}

func decodeEvent(v any) (*event, error) {
	es := fields(bodyDoc(v))
	ev := &event{}
	ev.ts, _ = es.value("ts").(bson.Timestamp)
	idx, _ := asInt64(es.value("idx"))
	ev.idx = uint32(idx)
	wall, _ := es.value("wall").(bson.DateTime)
	ev.wall = wall.Time()
	ev.op, _ = es.value("op").(string)
	ev.db, _ = es.value("db").(string)
	ev.coll, _ = es.value("coll").(string)
	ev.toDB, _ = es.value("toDB").(string)
	ev.toColl, _ = es.value("toColl").(string)
	ev.images = truthy(es.value("images"))
	ev.docKey = es.doc("docKey")
	ev.fullDoc = es.doc("fullDoc")
	ev.preImage = es.doc("preImage")
	ev.updDesc = es.doc("updDesc")
	ev.lsid = es.doc("lsid")
	ev.opDesc = es.doc("opDesc")
	ev.disamb = es.doc("disamb")
	ev.uuid, _ = es.value("uuid").(bson.Binary)
	if x := es.value("txnNumber"); x != nil {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("event txnNumber %s is not a long", formatValue(x))
		}
		ev.txnNumber = &n
	}
	if es.err != nil {
		return nil, es.err
	}
	switch ev.op {
	case "insert", "update", "replace", "delete", "drop", "dropDatabase", "rename", "create", "createIndexes", "dropIndexes", "modify":
	default:
		return nil, fmt.Errorf("event with unknown operation %q", ev.op)
	}
	if ev.ts.T == 0 {
		return nil, fmt.Errorf("event without a cluster time")
	}
	return ev, nil
}

func bodyDoc(v any) bson.D {
	d, _ := v.(bson.D)
	return d
}

// fieldReader reads the fields of a record, remembering the first one of the wrong type.
type fieldReader struct {
	d   bson.D
	err error
}

func fields(d bson.D) *fieldReader {
	fr := &fieldReader{d: d}
	if d == nil {
		fr.err = errors.New("a record is not a document")
	}
	return fr
}

func (fr *fieldReader) value(key string) any {
	v, _ := lookupField(fr.d, key)
	return v
}

// doc returns a document field, nil if absent.
func (fr *fieldReader) doc(key string) bson.D {
	v, ok := lookupField(fr.d, key)
	if !ok {
		return nil
	}
	d, isDoc := v.(bson.D)
	if !isDoc && fr.err == nil {
		fr.err = fmt.Errorf("field %s is %s, not a document", key, typeName(v))
	}
	return d
}

// removeStaleTemps removes temporary files left by a write that a crash interrupted.
func removeStaleTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".state-") && strings.HasSuffix(n, ".tmp") {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}
