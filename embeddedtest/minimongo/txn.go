package minimongo

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	txnActive = iota + 1
	txnCommitted
	txnAborted
)

// session is a logical session identified by its lsid.
type session struct {
	id         string
	lsid       bson.D
	txnNum     int64
	txn        *txn
	retryNum   int64
	retryReply bson.D
	lastUsed   time.Time
	// checkedOut: a command of the session is running. As in MongoDB, a
	// second command of the same session waits until the first ends (a
	// commit blocked by a fail point holds its retry until it finishes).
	checkedOut bool
}

// txn is a multi-document transaction. Reads see the committed state as of
// snapshot plus the transaction's own writes; writes are buffered and
// applied atomically at commit.
type txn struct {
	sess     *session
	number   int64
	snapshot uint64
	started  time.Time
	state    int
	writes   map[string]map[string]*txWrite
	colls    map[string]*collection
	order    []txRef
	events   []*event
	locks    []string
	newColls map[string]*collection // collections the transaction created, by namespace
	newOrder []*collection          // the same, in creation order
}

type txWrite struct {
	doc bson.D
	seq uint64
}

type txRef struct{ ns, key string }

// resolveSession attaches the request's logical session and transaction
// fields.
func (r *request) resolveSession() error {
	lsidV, hasLsid := r.arg("lsid")
	if v, ok := r.arg("txnNumber"); ok {
		n, ok := asInt64(v)
		if !ok {
			return newErr(codeTypeMismatch, "BSON field 'txnNumber' is the wrong type '%s', expected type 'long'", typeName(v))
		}
		r.txnNum = &n
	}
	if v, ok := r.arg("autocommit"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return newErr(codeTypeMismatch, "BSON field 'autocommit' is the wrong type '%s', expected type 'bool'", typeName(v))
		}
		if b {
			return newErr(codeInvalidOptions, "autocommit field can only be specified as false")
		}
		r.auto = &b
	}
	if v, ok := r.arg("startTransaction"); ok {
		if b, _ := v.(bool); !b {
			return newErr(codeInvalidOptions, "startTransaction field can only be specified as true")
		}
		r.start = true
	}
	if !hasLsid {
		if r.txnNum != nil {
			return newErr(50768, "Transaction number requires a session ID to also be specified")
		}
		if r.auto != nil {
			return newErr(codeInvalidOptions, "'autocommit' field requires a session id to also be specified")
		}
		return nil
	}
	lsid, ok := lsidV.(bson.D)
	if !ok {
		return newErr(codeTypeMismatch, "BSON field 'lsid' is the wrong type '%s', expected type 'object'", typeName(lsidV))
	}
	key := sessionKey(lsid)
	sess := r.st.sessions[key]
	if sess == nil {
		sess = &session{id: key, lsid: lsid}
		r.st.sessions[key] = sess
	}
	for sess.checkedOut {
		r.s.cond.Wait()
		if r.s.closed {
			return newErr(codeInterruptedAtShutdown, "interrupted at shutdown")
		}
	}
	sess.checkedOut, r.checkedOut = true, true
	sess.lastUsed = time.Now()
	r.sess = sess
	if r.auto != nil && r.txnNum == nil {
		return newErr(codeInvalidOptions, "'autocommit' field requires a transaction number to also be specified")
	}
	if r.start && r.auto == nil {
		return newErr(codeInvalidOptions, "'startTransaction' field requires 'autocommit' field to also be specified")
	}
	return nil
}

// enterTxn starts or continues the transaction named by the request.
func (r *request) enterTxn() error {
	sess, num := r.sess, *r.txnNum
	if num < sess.txnNum {
		return newErr(codeTransactionTooOld, "Cannot start transaction %d on session %s because a newer transaction %d has already started.", num, sess.id, sess.txnNum)
	}
	if r.start {
		if num == sess.txnNum && sess.txn != nil {
			return newErr(codeConflictingOperationInProgress, "Transaction with { txnNumber: %d } has already been started", num)
		}
		if sess.txn != nil && sess.txn.state == txnActive {
			r.st.abortTxn(sess.txn)
		}
		sess.txnNum = num
		sess.txn = r.st.beginTxn(sess, num)
		r.tx = sess.txn
		return nil
	}
	tx := sess.txn
	if tx == nil || tx.number != num {
		return &cmdError{Code: codeNoSuchTransaction, Msg: "Given transaction number " + itoa(num) + " does not match any in-progress transactions.", Labels: []string{"TransientTransactionError"}}
	}
	switch tx.state {
	case txnAborted:
		return &cmdError{Code: codeNoSuchTransaction, Msg: "Transaction with { txnNumber: " + itoa(num) + " } has been aborted.", Labels: []string{"TransientTransactionError"}}
	case txnCommitted:
		return newErr(codeTransactionCommitted, "Transaction with { txnNumber: %d } has been committed.", num)
	}
	r.tx = tx
	return nil
}

const codeConflictingOperationInProgress = 117

func itoa(n int64) string { return formatValue(n) }

func (st *storage) beginTxn(sess *session, num int64) *txn {
	tx := &txn{
		sess:     sess,
		number:   num,
		snapshot: st.ver,
		started:  time.Now(),
		state:    txnActive,
		writes:   map[string]map[string]*txWrite{},
		colls:    map[string]*collection{},
	}
	st.active[tx] = struct{}{}
	return tx
}

func (st *storage) endTxn(tx *txn) {
	for _, l := range tx.locks {
		if st.locks[l] == tx {
			delete(st.locks, l)
		}
	}
	tx.locks = nil
	delete(st.active, tx)
	st.gc()
	st.s.cond.Broadcast()
}

func (st *storage) abortTxn(tx *txn) {
	if tx.state != txnActive {
		return
	}
	tx.state = txnAborted
	st.endTxn(tx)
}

func (st *storage) expireTxns(now time.Time) {
	for tx := range st.active {
		if now.Sub(tx.started) > st.s.opts.TransactionLifetime {
			st.abortTxn(tx)
		}
	}
}

// lock claims a document for the transaction, failing with WriteConflict
// when another transaction holds it or it changed after the snapshot.
func (tx *txn) lock(st *storage, c *collection, key string) error {
	lk := c.ns() + "\x00" + key
	if o := st.locks[lk]; o != nil && o != tx {
		return errWriteConflict()
	}
	if rec := c.docs[key]; rec != nil && rec.ver > tx.snapshot {
		return errWriteConflict()
	}
	if st.locks[lk] == nil {
		st.locks[lk] = tx
		tx.locks = append(tx.locks, lk)
	}
	return nil
}

// put buffers a write of the transaction.
func (tx *txn) put(st *storage, c *collection, key string, doc bson.D) {
	ns := c.ns()
	m := tx.writes[ns]
	if m == nil {
		m = map[string]*txWrite{}
		tx.writes[ns] = m
		tx.colls[ns] = c
	}
	w, ok := m[key]
	if !ok {
		w = &txWrite{}
		if rec := (view{st: st, tx: tx}).committedAt(c, key); rec != nil && rec.doc != nil {
			w.seq = rec.seq
		}
		m[key] = w
		tx.order = append(tx.order, txRef{ns: ns, key: key})
	}
	if w.seq == 0 && doc != nil {
		w.seq = st.nextSeq()
	}
	w.doc = doc
}

// commitTxn applies a transaction atomically.
func (st *storage) commitTxn(tx *txn) error {
	touched := map[string]bool{}
	for _, ref := range tx.order {
		touched[ref.ns+"\x00"+ref.key] = true
	}
	for _, c := range tx.newOrder {
		if st.getColl(c.db, c.name) != nil {
			// created outside while the transaction had it private
			st.abortTxn(tx)
			return errWriteConflict()
		}
	}
	for _, ref := range tx.order {
		c := tx.colls[ref.ns]
		if tx.newColls[ref.ns] != c && st.getColl(c.db, c.name) != c {
			st.abortTxn(tx)
			return errWriteConflict()
		}
		doc := tx.writes[ref.ns][ref.key].doc
		for _, ix := range c.indexes {
			if ix.entries == nil {
				continue
			}
			for _, k := range ix.keysOf(doc) {
				if owner, ok := ix.entries[k.str]; ok && owner != ref.key && !touched[ref.ns+"\x00"+owner] {
					st.abortTxn(tx)
					return errWriteConflict()
				}
			}
		}
	}
	st.ver++
	for _, c := range tx.newOrder {
		st.installColl(c)
	}
	for _, ref := range tx.order {
		c := tx.colls[ref.ns]
		w := tx.writes[ref.ns][ref.key]
		st.commitWrite(c, ref.key, w.doc, w.seq)
	}
	num := tx.number
	for _, ev := range tx.events {
		ev.lsid = tx.sess.lsid
		ev.txnNumber = &num
	}
	st.appendEvents(tx.events)
	tx.state = txnCommitted
	st.endTxn(tx)
	return nil
}

func cmdCommitTransaction(r *request) (bson.D, error) {
	if r.sess == nil || r.txnNum == nil || r.auto == nil {
		return nil, newErr(codeInvalidOptions, "commitTransaction must be run within a transaction")
	}
	if r.db != "admin" {
		return nil, newErr(13, "commitTransaction may only be run against the admin database.")
	}
	sess, num := r.sess, *r.txnNum
	if num < sess.txnNum {
		return nil, newErr(codeTransactionTooOld, "Cannot commit transaction %d on session %s because a newer transaction %d has already started.", num, sess.id, sess.txnNum)
	}
	tx := sess.txn
	if tx == nil || tx.number != num {
		return nil, &cmdError{Code: codeNoSuchTransaction, Msg: "Given transaction number " + itoa(num) + " does not match any in-progress transactions.", Labels: []string{"TransientTransactionError"}}
	}
	switch tx.state {
	case txnCommitted:
		return okReply(), nil
	case txnAborted:
		return nil, &cmdError{Code: codeNoSuchTransaction, Msg: "Transaction with { txnNumber: " + itoa(num) + " } has been aborted.", Labels: []string{"TransientTransactionError"}}
	}
	if err := r.st.commitTxn(tx); err != nil {
		return nil, err
	}
	return okReply(), nil
}

func cmdAbortTransaction(r *request) (bson.D, error) {
	if r.sess == nil || r.txnNum == nil || r.auto == nil {
		return nil, newErr(codeInvalidOptions, "abortTransaction must be run within a transaction")
	}
	if r.db != "admin" {
		return nil, newErr(13, "abortTransaction may only be run against the admin database.")
	}
	sess, num := r.sess, *r.txnNum
	tx := sess.txn
	if tx == nil || tx.number != num || tx.state == txnAborted {
		return nil, &cmdError{Code: codeNoSuchTransaction, Msg: "Transaction with { txnNumber: " + itoa(num) + " } has been aborted.", Labels: []string{"TransientTransactionError"}}
	}
	if tx.state == txnCommitted {
		return nil, newErr(codeTransactionCommitted, "Transaction with { txnNumber: %d } has been committed.", num)
	}
	r.st.abortTxn(tx)
	return okReply(), nil
}
