package minimongo

import (
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// docRec is one version of a document. Documents are never mutated once
// stored; a write installs a new record. While transactions are open older
// versions stay reachable through prev so that snapshots can read them.
type docRec struct {
	doc  bson.D // nil marks a deletion
	ver  uint64 // commit version that produced this record
	seq  uint64 // insertion order (natural order)
	prev *docRec
}

type collection struct {
	db, name      string
	uuid          bson.Binary
	docs          map[string]*docRec
	order         []string // cached keys in natural order; nil when stale
	indexes       []*index
	prePostImages bool
	validation    *validation
}

func (c *collection) ns() string { return c.db + "." + c.name }

type database struct {
	name  string
	colls map[string]*collection
}

// storage holds all state of a Server. It is guarded by Server.mu.
type storage struct {
	s        *Server
	dbs      map[string]*database
	ver      uint64
	seq      uint64
	lastTS   bson.Timestamp
	oplog    []*event
	retained bool // old versions or tombstones are kept for transactions
	waiting  int  // change stream getMores waiting on notify
	lost     bool // events have been dropped from the oplog
	lostPos  pos  // newest event dropped from the oplog
	notify   chan struct{}
	cursors  map[int64]*cursor
	nextCur  int64
	sessions map[string]*session
	active   map[*txn]struct{}
	locks    map[string]*txn
	// snapReads are the snapshots of snapshot reads outside transactions, by
	// cluster time; their history is kept like that of open transactions
	snapReads map[bson.Timestamp]*snapRead
}

func newStorage(s *Server) *storage {
	return &storage{
		s:        s,
		dbs:      map[string]*database{},
		notify:   make(chan struct{}),
		cursors:  map[int64]*cursor{},
		nextCur:  1000,
		sessions: map[string]*session{},
		active:   map[*txn]struct{}{},
		locks:    map[string]*txn{},
	}
}

// nextTS returns a new cluster time, strictly greater than every previous.
func (st *storage) nextTS() bson.Timestamp {
	now := uint32(time.Now().Unix())
	if now > st.lastTS.T {
		st.lastTS = bson.Timestamp{T: now, I: 1}
	} else {
		st.lastTS.I++
	}
	return st.lastTS
}

func (st *storage) clusterTime() bson.Timestamp {
	if st.lastTS.T == 0 {
		return st.nextTS()
	}
	return st.lastTS
}

func validDBName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\. \"$\x00") {
		return newErr(codeInvalidNamespace, "Invalid database name: '%s'", name)
	}
	return nil
}

func validCollName(db, name string) error {
	if name == "" || strings.HasPrefix(name, ".") || strings.Contains(name, "\x00") || strings.Contains(name, "$") {
		return newErr(codeInvalidNamespace, "Invalid collection name: %s", name)
	}
	return nil
}

func (st *storage) getColl(db, name string) *collection {
	d := st.dbs[db]
	if d == nil {
		return nil
	}
	return d.colls[name]
}

// ensureColl returns the collection, creating it implicitly if needed.
func (st *storage) ensureColl(db, name string) (*collection, bool, error) {
	if c := st.getColl(db, name); c != nil {
		return c, false, nil
	}
	c, err := st.createColl(db, name)
	return c, err == nil, err
}

func (st *storage) createColl(db, name string) (*collection, error) {
	if err := validDBName(db); err != nil {
		return nil, err
	}
	if err := validCollName(db, name); err != nil {
		return nil, err
	}
	if st.getColl(db, name) != nil {
		return nil, newErr(codeNamespaceExists, "Collection %s.%s already exists.", db, name)
	}
	c := newCollection(db, name)
	st.installColl(c)
	st.appendEvent(&event{op: "create", db: db, coll: name, uuid: c.uuid, opDesc: bson.D{{Key: "idIndex", Value: idIndex().spec}}})
	return c, nil
}

// newCollection returns an empty collection with its _id index, not yet
// part of any database.
func newCollection(db, name string) *collection {
	id := bson.NewObjectID()
	return &collection{
		db:      db,
		name:    name,
		uuid:    bson.Binary{Subtype: 4, Data: append(id[:], 0, 0, 0, 0)},
		docs:    map[string]*docRec{},
		indexes: []*index{idIndex()},
	}
}

// installColl makes c part of its database, creating the database if needed.
func (st *storage) installColl(c *collection) {
	d := st.dbs[c.db]
	if d == nil {
		d = &database{name: c.db, colls: map[string]*collection{}}
		st.dbs[c.db] = d
	}
	d.colls[c.name] = c
}

// dropColl removes a collection and records a drop event.
func (st *storage) dropColl(c *collection) {
	d := st.dbs[c.db]
	delete(d.colls, c.name)
	if len(d.colls) == 0 {
		delete(st.dbs, c.db) // a database without collections does not exist
	}
	st.ver++
	st.appendEvent(&event{op: "drop", db: c.db, coll: c.name, uuid: c.uuid})
}

func (st *storage) dropDB(name string) {
	d := st.dbs[name]
	if d == nil {
		return
	}
	names := make([]string, 0, len(d.colls))
	for n := range d.colls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.dropColl(d.colls[n])
	}
	st.appendEvent(&event{op: "dropDatabase", db: name})
}

// orderedKeys returns the keys of all records in insertion order.
func (c *collection) orderedKeys() []string {
	if c.order == nil {
		recs := make([]*docRec, 0, len(c.docs))
		keys := make(map[*docRec]string, len(c.docs))
		for k, r := range c.docs {
			recs = append(recs, r)
			keys[r] = k
		}
		sort.Slice(recs, func(i, j int) bool { return recs[i].seq < recs[j].seq })
		c.order = make([]string, len(recs))
		for i, r := range recs {
			c.order[i] = keys[r]
		}
	}
	return c.order
}

// view reads documents either at the latest committed state or through a
// transaction's snapshot plus its own writes.
type view struct {
	st *storage
	tx *txn
}

type keyedDoc struct {
	key string
	doc bson.D
	seq uint64
}

func (v view) committedAt(c *collection, key string) *docRec {
	r := c.docs[key]
	if v.tx != nil {
		for r != nil && r.ver > v.tx.snapshot {
			r = r.prev
		}
	}
	return r
}

// get returns the document with the given _id key, or nil.
func (v view) get(c *collection, key string) bson.D {
	if v.tx != nil {
		if w, ok := v.tx.writes[c.ns()][key]; ok {
			return w.doc
		}
	}
	if r := v.committedAt(c, key); r != nil {
		return r.doc
	}
	return nil
}

// all returns every visible document in natural order.
func (v view) all(c *collection) []keyedDoc {
	keys := c.orderedKeys()
	out := make([]keyedDoc, 0, len(keys))
	if v.tx == nil {
		for _, k := range keys {
			if r := c.docs[k]; r.doc != nil {
				out = append(out, keyedDoc{key: k, doc: r.doc, seq: r.seq})
			}
		}
		return out
	}
	over := v.tx.writes[c.ns()]
	for _, k := range keys {
		if _, ok := over[k]; ok {
			continue
		}
		if r := v.committedAt(c, k); r != nil && r.doc != nil {
			out = append(out, keyedDoc{key: k, doc: r.doc, seq: r.seq})
		}
	}
	for k, w := range over {
		if w.doc != nil {
			out = append(out, keyedDoc{key: k, doc: w.doc, seq: w.seq})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// candidates returns the documents that may match filter, using the _id
// index or a unique index for equality filters when possible.
func (v view) candidates(c *collection, filter bson.D) []keyedDoc {
	if v.tx == nil {
		if key, ok := eqLookupKey(filter, "_id"); ok {
			if r := c.docs[key]; r != nil && r.doc != nil {
				return []keyedDoc{{key: key, doc: r.doc, seq: r.seq}}
			}
			return nil
		}
		if keys, ok := inLookupKeys(filter, "_id"); ok {
			var out []keyedDoc
			seen := map[string]bool{}
			for _, key := range keys {
				if r := c.docs[key]; r != nil && r.doc != nil && !seen[key] {
					seen[key] = true
					out = append(out, keyedDoc{key: key, doc: r.doc, seq: r.seq})
				}
			}
			sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
			return out
		}
		for _, ix := range c.indexes {
			if !ix.unique || ix.partial != nil || ix.sparse || ix.name == "_id_" {
				continue
			}
			if ks, ok := ix.lookupKey(filter); ok {
				if owner, ok := ix.entries[ks]; ok {
					if r := c.docs[owner]; r != nil && r.doc != nil {
						return []keyedDoc{{key: owner, doc: r.doc, seq: r.seq}}
					}
				}
				return nil
			}
		}
	}
	return v.all(c)
}

// idKey is the storage key for a document _id.
func idKey(id any) string { return keyString(id) }

// commitWrite installs newDoc (nil to delete) under key in the committed
// state, maintaining unique indexes. Callers have checked constraints.
func (st *storage) commitWrite(c *collection, key string, newDoc bson.D, seq uint64) {
	old := c.docs[key]
	var oldDoc bson.D
	if old != nil {
		oldDoc = old.doc
	}
	for _, ix := range c.indexes {
		ix.remove(key, oldDoc)
		ix.add(key, newDoc)
	}
	keep := len(st.active) > 0 || len(st.snapReads) > 0
	if newDoc == nil && !keep {
		if old != nil {
			delete(c.docs, key)
			c.order = nil
		}
		return
	}
	switch {
	case old != nil && old.doc != nil:
		seq = old.seq
	case seq == 0:
		seq = st.nextSeq()
	}
	rec := &docRec{doc: newDoc, ver: st.ver, seq: seq}
	if old != nil && keep {
		rec.prev = old
		st.retained = true
	}
	switch {
	case old == nil && c.order != nil && (len(c.order) == 0 || c.docs[c.order[len(c.order)-1]].seq < seq):
		c.order = append(c.order, key) // the common case: a new document goes last
	case old == nil, old.doc == nil && newDoc != nil:
		c.order = nil
	}
	c.docs[key] = rec
}

func (st *storage) nextSeq() uint64 {
	st.seq++
	return st.seq
}

// gc drops old versions once no transaction can read them.
func (st *storage) gc() {
	if len(st.active) > 0 || len(st.snapReads) > 0 || !st.retained {
		return
	}
	st.retained = false
	for _, d := range st.dbs {
		for _, c := range d.colls {
			for k, r := range c.docs {
				if r.doc == nil {
					delete(c.docs, k)
					c.order = nil
				} else {
					r.prev = nil
				}
			}
		}
	}
}

// sweep expires idle cursors, old transactions and idle sessions.
func (st *storage) sweep(now time.Time) {
	st.expireCursors(now)
	st.expireTxns(now)
	st.expireSessions(now)
	st.expireSnapshots(now)
	st.s.cond.Broadcast()
}

func (st *storage) sortedDBNames() []string {
	names := make([]string, 0, len(st.dbs))
	for n := range st.dbs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (d *database) sortedCollNames() []string {
	names := make([]string, 0, len(d.colls))
	for n := range d.colls {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sessionTimeout matches the logicalSessionTimeoutMinutes reported by hello.
const sessionTimeout = 30 * time.Minute

func (st *storage) expireSessions(now time.Time) {
	for k, sess := range st.sessions {
		if now.Sub(sess.lastUsed) > sessionTimeout && (sess.txn == nil || sess.txn.state != txnActive) {
			delete(st.sessions, k)
		}
	}
}
