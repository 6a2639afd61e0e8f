package minimongo

import (
	"encoding/hex"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

const (
	maxWireVersion = 21 // MongoDB 7.0
	serverVersion  = "7.0.0"

	// awaitableHelloCap bounds how long an awaitable hello is held. The
	// driver may start an awaited check just after an application error
	// marked the server unknown; MongoDB would hold that check for the full
	// heartbeat interval (10 s), stalling the retry that waits on it. Early
	// answers cost the monitor one more round trip.
	awaitableHelloCap = 500 * time.Millisecond
)

// request is one command being executed.
type request struct {
	s      *Server
	st     *storage
	conn   *conn
	name   string
	db     string
	cmd    bson.D
	sess   *session
	tx     *txn
	txnNum *int64
	auto   *bool
	start  bool

	ran            bool     // the command's handler was reached
	labels         []string // error labels set by failCommand, replacing the server's
	overrideLabels bool
	streamCursor   bool           // a getMore on a change stream cursor
	checkedOut     bool           // the request holds its session (see session.checkedOut)
	vars           exprVars       // the command's let variables (with NOW and CLUSTER_TIME), once read
	snap           *txn           // a snapshot read outside transactions reads through this
	snapTS         bson.Timestamp // and reports this as atClusterTime
}

func (r *request) view() view {
	if r.snap != nil {
		return view{st: r.st, tx: r.snap}
	}
	return view{st: r.st, tx: r.tx}
}

// arg returns a command field.
func (r *request) arg(k string) (any, bool) { return lookupField(r.cmd, k) }

var genericFields = map[string]bool{
	"$db": true, "lsid": true, "txnNumber": true, "autocommit": true, "startTransaction": true,
	"$clusterTime": true, "$readPreference": true, "readConcern": true, "writeConcern": true,
	"maxTimeMS": true, "comment": true, "apiVersion": true, "apiStrict": true,
	"apiDeprecationErrors": true, "$client": true, "stmtId": true, "stmtIds": true,
	"mayBypassWriteBlocking": true,
}

// checkFields rejects unknown command fields the way MongoDB's IDL parser
// does.
func (r *request) checkFields(allowed ...string) error {
	for _, e := range r.cmd[1:] {
		if genericFields[e.Key] {
			continue
		}
		ok := false
		for _, a := range allowed {
			if a == e.Key {
				ok = true
				break
			}
		}
		if !ok {
			return newErr(codeUnknownField, "BSON field '%s.%s' is an unknown field.", r.name, e.Key)
		}
	}
	return nil
}

type handler func(r *request) (bson.D, error)

var commands map[string]handler

// commands that may run inside a multi-document transaction.
var txnCommands = map[string]bool{
	"find": true, "insert": true, "update": true, "delete": true, "findAndModify": true,
	"aggregate": true, "distinct": true, "getMore": true, "killCursors": true,
	"commitTransaction": true, "abortTransaction": true, "create": true, "createIndexes": true,
}

// commands that are retryable writes.
var retryableWrites = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true}

func init() {
	commands = map[string]handler{
		"ping":                cmdPing,
		"buildInfo":           cmdBuildInfo,
		"buildinfo":           cmdBuildInfo,
		"endSessions":         cmdEndSessions,
		"killSessions":        cmdKillSessions,
		"refreshSessions":     cmdPing,
		"listDatabases":       cmdListDatabases,
		"listCollections":     cmdListCollections,
		"create":              cmdCreate,
		"drop":                cmdDrop,
		"dropDatabase":        cmdDropDatabase,
		"getMore":             cmdGetMore,
		"killCursors":         cmdKillCursors,
		"count":               cmdCount,
		"insert":              cmdInsert,
		"update":              cmdUpdate,
		"delete":              cmdDelete,
		"find":                cmdFind,
		"findAndModify":       cmdFindAndModify,
		"findandmodify":       cmdFindAndModify,
		"distinct":            cmdDistinct,
		"aggregate":           cmdAggregate,
		"createIndexes":       cmdCreateIndexes,
		"listIndexes":         cmdListIndexes,
		"dropIndexes":         cmdDropIndexes,
		"deleteIndexes":       cmdDropIndexes,
		"commitTransaction":   cmdCommitTransaction,
		"abortTransaction":    cmdAbortTransaction,
		"configureFailPoint":  cmdConfigureFailPoint,
		"renameCollection":    cmdRenameCollection,
		"collMod":             cmdCollMod,
		"createSearchIndexes": cmdSearchIndex,
		"updateSearchIndex":   cmdSearchIndex,
		"dropSearchIndex":     cmdSearchIndex,
	}
}

// errSearchNotEnabled is what a MongoDB 7.0 server outside Atlas answers to the
// search index commands and $listSearchIndexes.
func errSearchNotEnabled() error {
	return &cmdError{Code: 31082, CodeName: "SearchNotEnabled", Msg: "Using Atlas Search Database Commands and the $listSearchIndexes aggregation stage requires additional configuration. Please connect to Atlas or an AtlasCLI local deployment to enable. For more information on how to connect, see https://dochub.mongodb.org/core/atlas-cli-deploy-local-reqs"}
}

func cmdSearchIndex(r *request) (bson.D, error) { return nil, errSearchNotEnabled() }

// handle executes one wire message and returns the reply document.
func (s *Server) handle(c *conn, m *message) bson.D {
	if err := bsoncore.Document(m.body).Validate(); err != nil {
		return errorReply(newErr(codeInvalidBSON, "invalid BSON in command: %v", err))
	}
	cmd, err := decodeDoc(bsoncore.Document(m.body))
	if err != nil || len(cmd) == 0 {
		return errorReply(newErr(codeFailedToParse, "invalid command document"))
	}
	name := cmd[0].Key
	db, _ := lookupField(cmd, "$db")
	dbName, _ := db.(string)
	if m.legacy {
		dbName = strings.TrimSuffix(m.fullColl, ".$cmd")
		switch name {
		case "isMaster", "ismaster", "hello":
		default:
			return errorReply(newErr(codeCommandNotFound, "Unsupported OP_QUERY command: %s. The client driver may require an upgrade.", name))
		}
	}
	switch name {
	case "hello", "isMaster", "ismaster":
		return s.hello(c, cmd, name != "hello")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errorReply(newErr(codeInterruptedAtShutdown, "interrupted at shutdown"))
	}
	r := &request{s: s, st: s.st, conn: c, name: name, db: dbName, cmd: cmd}
	lastOp, ver := c.lastOp, s.st.ver
	reply, err := s.dispatch(r)
	if r.checkedOut {
		r.sess.checkedOut = false
		s.cond.Broadcast()
	}
	wrote := s.st.ver != ver
	if wrote {
		c.lastOp = s.st.ver
	}
	if s.persist != nil && ddlCommands[name] {
		s.persist.ddl = true
	}
	if err != nil {
		s.log.Debug("minimongo: command failed", "command", name, "db", dbName, "conn", c.id, "error", err)
	}
	return s.withClusterTime(s.finishReply(r, reply, err, wrote, lastOp))
}

// finishReply renders the outcome of a command: the error document, the
// write concern error of a command that waited for one and the error labels
// MongoDB attaches.
func (s *Server) finishReply(r *request, reply bson.D, err error, wrote bool, lastOp uint64) bson.D {
	var rc replyCode
	var preset []string
	if err != nil {
		ce := asCmdError(err)
		reply = errorBody(ce)
		rc.code, rc.hasCode, preset = ce.Code, true, ce.Labels
	}
	if r.ran && writeConcernCommands[r.name] {
		wce := s.failWriteConcern(r.conn, r.name, r.db, r.cmd, r.overrideWith)
		if wce == nil {
			wce = r.writeConcernError()
		}
		if wce != nil {
			if c, ok := lookupField(wce, "code"); ok {
				n, _ := asInt64(c)
				rc.wcCode, rc.hasWCCode = int32(n), true
			}
			// copy: reply may be a recorded retryable-write reply
			reply = append(append(bson.D{}, reply...), bson.E{Key: "writeConcernError", Value: wce})
		}
	}
	if !rc.hasCode && !rc.hasWCCode {
		return reply
	}
	labels := r.labels
	if !r.overrideLabels {
		labels = mergeLabels(r.errorLabels(rc, wrote, lastOp), preset)
	}
	if len(labels) > 0 {
		reply = append(append(bson.D{}, reply...), bson.E{Key: "errorLabels", Value: labelsValue(labels)})
	}
	return reply
}

// overrideWith replaces the labels the server would attach by those
// failCommand was configured with.
func (r *request) overrideWith(labels []string) {
	r.labels, r.overrideLabels = labels, true
}

func (s *Server) withClusterTime(reply bson.D) bson.D {
	ct := s.st.clusterTime()
	// copy: reply may be shared (a recorded retryable-write reply) and is
	// encoded after the lock is released
	out := make(bson.D, len(reply), len(reply)+2)
	copy(out, reply)
	return append(out,
		bson.E{Key: "$clusterTime", Value: bson.D{
			{Key: "clusterTime", Value: ct},
			{Key: "signature", Value: bson.D{
				{Key: "hash", Value: bson.Binary{Subtype: 0, Data: make([]byte, 20)}},
				{Key: "keyId", Value: int64(0)},
			}},
		}},
		bson.E{Key: "operationTime", Value: ct},
	)
}

func (s *Server) dispatch(r *request) (bson.D, error) {
	h, ok := commands[r.name]
	if !ok {
		return nil, newErr(codeCommandNotFound, "no such command: '%s'", r.name)
	}
	if r.db == "" {
		return nil, newErr(40571, "OP_MSG requests require a $db argument")
	}
	if err := r.resolveSession(); err != nil {
		return nil, err
	}
	if err := s.evalFailCommand(r.conn, r.name, r.db, r.cmd, r.overrideWith); err != nil {
		return nil, err
	}
	if rc, ok := r.arg("readConcern"); ok {
		snap, at, err := checkReadConcern(rc, r.auto != nil)
		if err != nil {
			return nil, err
		}
		if snap && r.auto == nil {
			if err := r.snapshotRead(at); err != nil {
				return nil, err
			}
		}
	}
	if r.auto != nil && !txnCommands[r.name] {
		return nil, newErr(codeOperationNotSupportedInTx, "Cannot run '%s' in a multi-document transaction.", r.name)
	}
	if r.auto != nil && r.name != "commitTransaction" && r.name != "abortTransaction" {
		if err := r.enterTxn(); err != nil {
			return nil, err
		}
	}
	retry := r.sess != nil && r.txnNum != nil && r.auto == nil && retryableWrites[r.name]
	if retry {
		if *r.txnNum < r.sess.retryNum {
			return nil, newErr(codeTransactionTooOld, "Retryable write with txnNumber %d is prohibited on session %s because a newer retryable write with txnNumber %d has already started on this session.", *r.txnNum, r.sess.id, r.sess.retryNum)
		}
		if *r.txnNum == r.sess.retryNum && r.sess.retryReply != nil {
			r.ran = true
			return r.sess.retryReply, nil
		}
	}
	r.ran = true
	if retry {
		if err := r.txnWriteBefore(); err != nil {
			return nil, err
		}
	}
	verBefore := r.st.ver
	reply, err := callHandler(h, r)
	if retry && err == nil && r.st.ver != verBefore {
		r.txnWriteAfter()
	}
	if r.tx != nil && r.name != "commitTransaction" && r.name != "abortTransaction" {
		if err != nil || hasWriteErrors(reply) {
			r.st.abortTxn(r.tx)
		}
	}
	if err != nil {
		return nil, err
	}
	if retry {
		r.sess.retryNum = *r.txnNum
		r.sess.retryReply = reply
	}
	if r.snap != nil {
		reply = r.withAtClusterTime(reply)
	}
	return reply, nil
}

func hasWriteErrors(reply bson.D) bool {
	_, ok := lookupField(reply, "writeErrors")
	return ok
}

// checkReadConcern validates a read concern; it reports a snapshot read and its
// atClusterTime.
func checkReadConcern(rc any, inTxn bool) (bool, *bson.Timestamp, error) {
	d, ok := rc.(bson.D)
	if !ok {
		return false, nil, newErr(codeTypeMismatch, "BSON field 'readConcern' is the wrong type '%s', expected type 'object'", typeName(rc))
	}
	snap := false
	var at *bson.Timestamp
	for _, e := range d {
		switch e.Key {
		case "level":
			switch e.Value {
			case "local", "majority", "available", "linearizable":
			case "snapshot":
				snap = true
			default:
				return false, nil, errBadValue("Invalid readConcern level " + formatValue(e.Value))
			}
		case "atClusterTime":
			ts, ok := e.Value.(bson.Timestamp)
			if !ok {
				return false, nil, newErr(codeTypeMismatch, "BSON field 'readConcern.atClusterTime' is the wrong type '%s', expected type 'timestamp'", typeName(e.Value))
			}
			at = &ts
		case "afterClusterTime", "provenance":
		default:
			return false, nil, errUnsupported("readConcern option " + e.Key)
		}
	}
	if at != nil && !snap {
		return false, nil, newErr(codeInvalidOptions, "readConcern level must be snapshot to specify atClusterTime")
	}
	if at != nil && inTxn {
		return false, nil, errUnsupported("readConcern atClusterTime inside a transaction")
	}
	return snap, at, nil
}

// ---- handshake and administrative commands ----

func (s *Server) hello(c *conn, cmd bson.D, legacy bool) bson.D {
	if _, ok := lookupField(cmd, "topologyVersion"); ok {
		// Awaitable hello used by the driver's streaming monitor: the
		// topology never changes, so answer after maxAwaitTimeMS (capped,
		// see awaitableHelloCap) or at shutdown.
		if v, ok := lookupField(cmd, "maxAwaitTimeMS"); ok {
			if ms, ok := asInt64(v); ok && ms > 0 {
				wait := min(time.Duration(ms)*time.Millisecond, awaitableHelloCap)
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.closing:
					t.Stop()
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := helloAppName(cmd); ok {
		c.appName = n
	}
	name := cmd[0].Key
	db, _ := lookupField(cmd, "$db")
	dbName, _ := db.(string)
	var labels []string
	override := false
	if err := s.evalFailCommand(c, name, dbName, cmd, func(l []string) { labels, override = l, true }); err != nil {
		ce := asCmdError(err)
		reply := errorBody(ce)
		if !override {
			labels = ce.Labels
		}
		if len(labels) > 0 {
			reply = append(reply, bson.E{Key: "errorLabels", Value: labelsValue(labels)})
		}
		return s.withClusterTime(reply)
	}
	reply := bson.D{}
	if _, ok := lookupField(cmd, "helloOk"); ok {
		reply = append(reply, bson.E{Key: "helloOk", Value: true})
	}
	if legacy {
		reply = append(reply, bson.E{Key: "ismaster", Value: true})
	} else {
		reply = append(reply, bson.E{Key: "isWritablePrimary", Value: true})
	}
	ct := s.st.clusterTime()
	reply = append(reply,
		bson.E{Key: "topologyVersion", Value: bson.D{{Key: "processId", Value: s.processID}, {Key: "counter", Value: int64(0)}}},
		bson.E{Key: "hosts", Value: bson.A{s.addr}},
		bson.E{Key: "setName", Value: s.opts.ReplicaSet},
		bson.E{Key: "setVersion", Value: int32(1)},
		bson.E{Key: "secondary", Value: false},
		bson.E{Key: "primary", Value: s.addr},
		bson.E{Key: "me", Value: s.addr},
		bson.E{Key: "electionId", Value: bson.ObjectID{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}},
		bson.E{Key: "lastWrite", Value: bson.D{
			{Key: "opTime", Value: bson.D{{Key: "ts", Value: ct}, {Key: "t", Value: int64(1)}}},
			{Key: "lastWriteDate", Value: bson.NewDateTimeFromTime(time.Unix(int64(ct.T), 0))},
		}},
		bson.E{Key: "maxBsonObjectSize", Value: int32(16 * 1024 * 1024)},
		bson.E{Key: "maxMessageSizeBytes", Value: int32(maxMessageSize)},
		bson.E{Key: "maxWriteBatchSize", Value: int32(100000)},
		bson.E{Key: "localTime", Value: bson.NewDateTimeFromTime(time.Now())},
		bson.E{Key: "logicalSessionTimeoutMinutes", Value: int32(30)},
		bson.E{Key: "connectionId", Value: c.id},
		bson.E{Key: "minWireVersion", Value: int32(0)},
		bson.E{Key: "maxWireVersion", Value: int32(maxWireVersion)},
		bson.E{Key: "readOnly", Value: false},
		bson.E{Key: "ok", Value: 1.0},
	)
	return s.withClusterTime(reply)
}

func okReply(fields ...bson.E) bson.D {
	return append(bson.D(fields), bson.E{Key: "ok", Value: 1.0})
}

func cmdPing(r *request) (bson.D, error) { return okReply(), nil }

func cmdBuildInfo(r *request) (bson.D, error) {
	return okReply(
		bson.E{Key: "version", Value: serverVersion},
		bson.E{Key: "gitVersion", Value: "minimongo"},
		bson.E{Key: "versionArray", Value: bson.A{int32(7), int32(0), int32(0), int32(0)}},
		bson.E{Key: "bits", Value: int32(64)},
		bson.E{Key: "maxBsonObjectSize", Value: int32(16 * 1024 * 1024)},
		bson.E{Key: "storageEngines", Value: bson.A{"minimongo"}},
	), nil
}

func cmdEndSessions(r *request) (bson.D, error) {
	ids, _ := r.cmd[0].Value.(bson.A)
	for _, x := range ids {
		if d, ok := x.(bson.D); ok {
			key := sessionKey(d)
			if sess := r.st.sessions[key]; sess != nil {
				if sess.txn != nil && sess.txn.state == txnActive {
					r.st.abortTxn(sess.txn)
				}
				delete(r.st.sessions, key)
			}
		}
	}
	return okReply(), nil
}

// cmdKillSessions kills the sessions whose ids are listed (every session for an empty list):
// their open transactions are aborted, as MongoDB aborts unprepared transactions of killed
// sessions. Unknown ids are ignored; a killed session may be used again.
func cmdKillSessions(r *request) (bson.D, error) {
	ids, ok := r.cmd[0].Value.(bson.A)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field 'killSessions' is the wrong type '%s', expected type 'array'", typeName(r.cmd[0].Value))
	}
	kill := func(sess *session) {
		if sess.txn != nil && sess.txn.state == txnActive {
			r.st.abortTxn(sess.txn)
		}
	}
	if len(ids) == 0 {
		for _, sess := range r.st.sessions {
			kill(sess)
		}
		return okReply(), nil
	}
	for _, x := range ids {
		d, ok := x.(bson.D)
		if !ok {
			return nil, newErr(codeTypeMismatch, "BSON field 'KillAllSessionsByPattern.lsid' is the wrong type '%s', expected type 'object'", typeName(x))
		}
		if sess := r.st.sessions[sessionKey(d)]; sess != nil {
			kill(sess)
		}
	}
	return okReply(), nil
}

func cmdListDatabases(r *request) (bson.D, error) {
	if err := r.checkFields("filter", "nameOnly", "authorizedDatabases"); err != nil {
		return nil, err
	}
	if r.db != "admin" {
		return nil, newErr(13, "listDatabases may only be run against the admin database.")
	}
	var m matcher = matchAll
	if f, ok := r.arg("filter"); ok {
		fd, _ := f.(bson.D)
		var err error
		if m, err = compileFilter(fd); err != nil {
			return nil, err
		}
	}
	nameOnly := false
	if v, ok := r.arg("nameOnly"); ok {
		nameOnly = truthy(v)
	}
	dbs := bson.A{}
	var total int64
	for _, n := range r.st.sortedDBNames() {
		d := r.st.dbs[n]
		size := int64(0)
		for _, c := range d.colls {
			size += int64(len(c.docs)) * 64
		}
		size += 4096
		entry := bson.D{{Key: "name", Value: n}, {Key: "sizeOnDisk", Value: size}, {Key: "empty", Value: len(d.colls) == 0}}
		if !m(entry) {
			continue
		}
		total += size
		if nameOnly {
			entry = entry[:1]
		}
		dbs = append(dbs, entry)
	}
	if nameOnly {
		return okReply(bson.E{Key: "databases", Value: dbs}), nil
	}
	return okReply(bson.E{Key: "databases", Value: dbs}, bson.E{Key: "totalSize", Value: total}, bson.E{Key: "totalSizeMb", Value: total >> 20}), nil
}

func collInfo(c *collection, nameOnly bool) bson.D {
	if nameOnly {
		return bson.D{{Key: "name", Value: c.name}, {Key: "type", Value: "collection"}}
	}
	opts := c.options()
	return bson.D{
		{Key: "name", Value: c.name},
		{Key: "type", Value: "collection"},
		{Key: "options", Value: opts},
		{Key: "info", Value: bson.D{{Key: "readOnly", Value: false}, {Key: "uuid", Value: c.uuid}}},
		{Key: "idIndex", Value: idIndex().spec},
	}
}

func cmdListCollections(r *request) (bson.D, error) {
	if err := r.checkFields("filter", "nameOnly", "authorizedCollections", "cursor"); err != nil {
		return nil, err
	}
	var m matcher = matchAll
	if f, ok := r.arg("filter"); ok && f != nil {
		fd, _ := f.(bson.D)
		var err error
		if m, err = compileFilter(fd); err != nil {
			return nil, err
		}
	}
	nameOnly := false
	if v, ok := r.arg("nameOnly"); ok {
		nameOnly = truthy(v)
	}
	var out []bson.D
	if d := r.st.dbs[r.db]; d != nil {
		for _, n := range d.sortedCollNames() {
			full := collInfo(d.colls[n], false)
			if m(full) {
				out = append(out, collInfo(d.colls[n], nameOnly))
			}
		}
	}
	return r.cursorReply(r.db+".$cmd.listCollections", out, batchSizeOf(r, "cursor"), false)
}

func cmdCreate(r *request) (bson.D, error) {
	if err := r.checkFields("changeStreamPreAndPostImages", "capped", "size", "max", "validator",
		"validationLevel", "validationAction", "timeseries", "clusteredIndex", "expireAfterSeconds",
		"collation", "viewOn", "pipeline", "storageEngine", "indexOptionDefaults", "encryptedFields"); err != nil {
		return nil, err
	}
	name, ok := r.cmd[0].Value.(string)
	if !ok {
		return nil, newErr(codeTypeMismatch, "collection name has invalid type %s", typeName(r.cmd[0].Value))
	}
	images := false
	var v validation
	if err := parseValidation(r, &v); err != nil {
		return nil, err
	}
	for _, e := range r.cmd[1:] {
		if genericFields[e.Key] {
			continue
		}
		switch e.Key {
		case "validator", "validationLevel", "validationAction":
			continue
		}
		if e.Key == "changeStreamPreAndPostImages" {
			d, _ := e.Value.(bson.D)
			en, _ := lookupField(d, "enabled")
			images = truthy(en)
			continue
		}
		if e.Key == "capped" && !truthy(e.Value) {
			continue
		}
		if e.Key == "collation" {
			if err := checkCollation(e.Value, "create"); err != nil {
				return nil, err
			}
			continue
		}
		return nil, errUnsupported("collection option " + e.Key)
	}
	if c := r.coll(name); c != nil {
		return nil, newErr(codeNamespaceExists, "Collection %s.%s already exists.", r.db, name)
	}
	c, err := r.ensureColl(name)
	if err != nil {
		return nil, err
	}
	c.prePostImages = images
	if v.validator != nil || v.level != "" || v.action != "" {
		c.validation = &v
	}
	return okReply(), nil
}

func cmdDrop(r *request) (bson.D, error) {
	if err := r.checkFields(); err != nil {
		return nil, err
	}
	name, _ := r.cmd[0].Value.(string)
	c := r.coll(name)
	if c == nil {
		return okReply(), nil
	}
	n := int32(len(c.indexes))
	r.st.dropColl(c)
	return okReply(bson.E{Key: "nIndexesWas", Value: n}, bson.E{Key: "ns", Value: r.db + "." + name}), nil
}

func cmdDropDatabase(r *request) (bson.D, error) {
	if err := r.checkFields(); err != nil {
		return nil, err
	}
	if _, exists := r.st.dbs[r.db]; !exists {
		return okReply(), nil
	}
	r.st.dropDB(r.db)
	return okReply(bson.E{Key: "dropped", Value: r.db}), nil
}

// sessionKey identifies a logical session by its lsid.id.
func sessionKey(lsid bson.D) string {
	id, _ := lookupField(lsid, "id")
	if b, ok := id.(bson.Binary); ok {
		return hex.EncodeToString(b.Data)
	}
	return keyString(id)
}

// callHandler runs a command handler, turning an expression error raised
// inside a query matcher into the command's error.
func callHandler(h handler, r *request) (reply bson.D, err error) {
	defer func() {
		if p := recover(); p != nil {
			ee, ok := p.(exprError)
			if !ok {
				panic(p)
			}
			reply, err = nil, ee.err
		}
	}()
	return h(r)
}
