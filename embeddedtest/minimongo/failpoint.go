package minimongo

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fail point modes, as configureFailPoint's mode field names them.
const (
	fpOff = iota
	fpAlwaysOn
	fpTimes
	fpSkip
	fpRandom
)

// failCommand is the state of the failCommand fail point: its mode and the
// parsed data that says which commands it affects and how.
type failCommand struct {
	mode    int
	n       int64   // remaining activations (times) or evaluations to skip (skip)
	prob    float64 // activationProbability
	entered int64   // activations so far; configureFailPoint reports it as count

	cmds        map[string]bool
	all         bool // failAllCommands
	code        int32
	hasCode     bool
	labels      []string
	hasLabels   bool // errorLabels given, possibly empty: it replaces the server's labels
	closeConn   bool
	block       time.Duration // negative: blockConnection without a positive blockTimeMS
	blockErr    error         // a blockConnection the fail point cannot apply
	wce         bson.D
	appName     *string
	threadName  *string
	namespace   *string
	extraInfo   bson.D
	internalCmd bool // failInternalCommands: no client of this server is internal
	closeSet    bool // closeConnection was given (onPrimaryTransactionalWrite defaults it to true)
}

// failPointSlot returns where the named fail point's configuration lives.
func (s *Server) failPointSlot(name string) (**failCommand, bool) {
	switch name {
	case "failCommand":
		return &s.failCmd, true
	case "failGetMoreAfterCursorCheckout":
		return &s.failGetMore, true
	case "onPrimaryTransactionalWrite":
		return &s.failTxnWrite, true
	}
	return nil, false
}

// parseGetMoreData reads the data of failGetMoreAfterCursorCheckout: errorCode
// (default InternalError, 1) and the predicates failCommand shares with it
// (appName, namespace, threadName). MongoDB ignores any other field of this
// fail point's data (the specifications' tests pass closeConnection: false), and
// so does this server.
func (fp *failCommand) parseGetMoreData(d bson.D) error {
	fp.code, fp.hasCode = 1, true
	fp.cmds = map[string]bool{"getMore": true}
	for _, e := range d {
		switch e.Key {
		case "errorCode":
			n, ok := asInt64(e.Value)
			if !ok {
				return newErr(codeTypeMismatch, "failGetMoreAfterCursorCheckout 'errorCode' must be a number")
			}
			fp.code = int32(n)
		case "appName", "namespace", "threadName":
			s, ok := e.Value.(string)
			if !ok {
				return newErr(codeTypeMismatch, "failGetMoreAfterCursorCheckout '%s' must be a string", e.Key)
			}
			switch e.Key {
			case "appName":
				fp.appName = &s
			case "namespace":
				fp.namespace = &s
			default:
				fp.threadName = &s
			}
		}
	}
	return nil
}

// parseTxnWriteData reads the data of onPrimaryTransactionalWrite:
// closeConnection (default true) and failBeforeCommitExceptionCode. MongoDB
// reads no other field of this fail point's data.
func (fp *failCommand) parseTxnWriteData(d bson.D) error {
	for _, e := range d {
		switch e.Key {
		case "closeConnection":
			b, ok := e.Value.(bool)
			if !ok {
				return newErr(codeTypeMismatch, "onPrimaryTransactionalWrite 'closeConnection' must be a boolean")
			}
			fp.closeConn, fp.closeSet = b, true
		case "failBeforeCommitExceptionCode":
			n, ok := asInt64(e.Value)
			if !ok {
				return newErr(codeTypeMismatch, "onPrimaryTransactionalWrite 'failBeforeCommitExceptionCode' must be a number")
			}
			fp.code, fp.hasCode = int32(n), true
		}
	}
	return nil
}

// evalGetMoreFailPoint applies failGetMoreAfterCursorCheckout to a getMore
// that has checked out its cursor: when it fires the getMore fails with the
// configured code and, as in MongoDB, the cursor is destroyed.
func (r *request) evalGetMoreFailPoint(id int64, cur *cursor) error {
	fp := r.s.failGetMore
	if fp == nil || fp.mode == fpOff || !fp.matches(r.conn, "getMore", cur.ns) || !fp.fire() {
		return nil
	}
	if cur.stream != nil {
		r.streamCursor = true
	}
	delete(r.st.cursors, id)
	return newErr(fp.code, "Hit the 'failGetMoreAfterCursorCheckout' failpoint")
}

// txnWriteBefore applies onPrimaryTransactionalWrite with
// failBeforeCommitExceptionCode to a retryable write about to run: the write
// fails before anything is applied (MongoDB fails the statement's storage
// transaction, so the write "must not be reflected"), and the connection is
// closed unless closeConnection is false.
func (r *request) txnWriteBefore() error {
	fp := r.s.failTxnWrite
	if fp == nil || fp.mode == fpOff || !fp.hasCode || !fp.fire() {
		return nil
	}
	if fp.closeConn {
		r.conn.closeNow = true
	}
	return newErr(fp.code, "Failing write for %s:%d due to failpoint. The write must not be reflected.", r.sess.id, *r.txnNum)
}

// txnWriteAfter applies onPrimaryTransactionalWrite without an exception code
// to a retryable write that wrote: the write is applied and recorded, and the
// connection is closed before the reply is sent (unless closeConnection is
// false), so the driver retries and receives the recorded result.
func (r *request) txnWriteAfter() {
	fp := r.s.failTxnWrite
	if fp == nil || fp.mode == fpOff || fp.hasCode || !fp.fire() {
		return
	}
	if fp.closeConn {
		r.conn.closeNow = true
	}
}

// commandAliases lists the names each command also answers to; failCommands
// matches a command by any of them, as MongoDB does.
var commandAliases = map[string][]string{
	"hello":         {"hello", "isMaster", "ismaster"},
	"isMaster":      {"hello", "isMaster", "ismaster"},
	"ismaster":      {"hello", "isMaster", "ismaster"},
	"findAndModify": {"findAndModify", "findandmodify"},
	"findandmodify": {"findAndModify", "findandmodify"},
	"buildInfo":     {"buildInfo", "buildinfo"},
	"buildinfo":     {"buildInfo", "buildinfo"},
	"dropIndexes":   {"dropIndexes", "deleteIndexes"},
	"deleteIndexes": {"dropIndexes", "deleteIndexes"},
}

// writeConcernCommands are the commands that accept a write concern: only
// they wait for it, and only they carry a writeConcernError.
var writeConcernCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true,
	"create": true, "drop": true, "dropDatabase": true, "createIndexes": true, "dropIndexes": true,
	"deleteIndexes": true, "renameCollection": true, "collMod": true,
	"commitTransaction": true, "abortTransaction": true,
}

// cmdConfigureFailPoint configures the failCommand fail point. MongoDB has
// the command only with enableTestCommands; tests written against it run
// against a real deployment started that way too.
func cmdConfigureFailPoint(r *request) (bson.D, error) {
	if err := r.checkFields("mode", "data"); err != nil {
		return nil, err
	}
	if r.db != "admin" {
		return nil, newErr(13, "configureFailPoint may only be run against the admin database.")
	}
	name, ok := r.cmd[0].Value.(string)
	if !ok {
		return nil, newErr(codeTypeMismatch, "configureFailPoint must name a fail point")
	}
	slot, ok := r.s.failPointSlot(name)
	if !ok {
		return nil, errUnsupported(fmt.Sprintf("fail point '%s' (only failCommand, failGetMoreAfterCursorCheckout and onPrimaryTransactionalWrite)", name))
	}
	fp := &failCommand{}
	mv, ok := r.arg("mode")
	if !ok {
		return nil, errBadValue("Missing mode")
	}
	if err := fp.parseMode(mv); err != nil {
		return nil, err
	}
	if dv, ok := r.arg("data"); ok {
		d, isDoc := dv.(bson.D)
		if !isDoc {
			return nil, errBadValue("the 'data' option to configureFailPoint must be an object")
		}
		parse := fp.parseData
		switch name {
		case "failGetMoreAfterCursorCheckout":
			parse = fp.parseGetMoreData
		case "onPrimaryTransactionalWrite":
			parse = fp.parseTxnWriteData
		}
		if err := parse(d); err != nil {
			return nil, err
		}
	}
	if name == "onPrimaryTransactionalWrite" && !fp.closeSet {
		fp.closeConn = true // closeConnection defaults to true for this fail point
	}
	var count int64
	if old := *slot; old != nil {
		count = old.entered
	}
	// the count of activations carries over reconfiguration, as MongoDB's
	// timesEntered does
	fp.entered = count
	*slot = fp
	var cv any = count
	if count <= 1<<31-1 {
		cv = int32(count)
	}
	return okReply(bson.E{Key: "count", Value: cv}), nil
}

func (fp *failCommand) parseMode(v any) error {
	switch m := v.(type) {
	case string:
		switch m {
		case "off":
			fp.mode = fpOff
		case "alwaysOn":
			fp.mode = fpAlwaysOn
		default:
			return errBadValue("unknown mode: " + m)
		}
		return nil
	case bson.D:
		if len(m) != 1 {
			return errBadValue("'mode' must be one of 'off', 'alwaysOn', 'times', 'skip' and 'activationProbability'")
		}
		switch m[0].Key {
		case "times", "skip":
			n, ok := asInt64(m[0].Value)
			if !ok || n < 0 {
				return errBadValue(fmt.Sprintf("'%s' option to 'mode' must be a non-negative integer", m[0].Key))
			}
			fp.mode, fp.n = fpTimes, n
			if m[0].Key == "skip" {
				fp.mode = fpSkip
			} else if n == 0 {
				fp.mode = fpOff
			}
			return nil
		case "activationProbability":
			p, ok := m[0].Value.(float64)
			if !ok || p < 0 || p > 1 {
				return errBadValue("'activationProbability' option to 'mode' must be a double between 0 and 1")
			}
			fp.mode, fp.prob = fpRandom, p
			return nil
		}
		return errBadValue("'mode' must be one of 'off', 'alwaysOn', 'times', 'skip' and 'activationProbability'")
	}
	return newErr(codeTypeMismatch, "'mode' must be a string or an object")
}

func (fp *failCommand) parseData(d bson.D) error {
	str := func(e bson.E) (*string, error) {
		s, ok := e.Value.(string)
		if !ok {
			return nil, newErr(codeTypeMismatch, "failCommand '%s' must be a string", e.Key)
		}
		return &s, nil
	}
	var err error
	for _, e := range d {
		switch e.Key {
		case "failCommands":
			arr, ok := e.Value.(bson.A)
			if !ok {
				return newErr(codeTypeMismatch, "failCommand 'failCommands' must be an array of command names")
			}
			fp.cmds = map[string]bool{}
			for _, x := range arr {
				if s, ok := x.(string); ok {
					fp.cmds[s] = true
				}
			}
		case "failAllCommands":
			fp.all = true
		case "errorCode":
			n, ok := asInt64(e.Value)
			if ok {
				fp.code, fp.hasCode = int32(n), true
			}
		case "errorLabels":
			arr, ok := e.Value.(bson.A)
			if !ok {
				continue // MongoDB uses errorLabels only when it is an array
			}
			fp.hasLabels, fp.labels = true, []string{}
			for _, x := range arr {
				if s, ok := x.(string); ok {
					fp.labels = append(fp.labels, s)
				}
			}
		case "closeConnection":
			fp.closeConn, _ = e.Value.(bool)
		case "blockConnection":
			b, _ := e.Value.(bool)
			if b {
				fp.block = -1 // blockTimeMS is checked below
			}
		case "blockTimeMS":
		case "writeConcernError":
			wce, ok := e.Value.(bson.D)
			if !ok {
				return newErr(codeTypeMismatch, "failCommand 'writeConcernError' must be an object")
			}
			fp.wce = wce
		case "appName":
			if fp.appName, err = str(e); err != nil {
				return err
			}
		case "threadName":
			if fp.threadName, err = str(e); err != nil {
				return err
			}
		case "namespace":
			if fp.namespace, err = str(e); err != nil {
				return err
			}
		case "errorExtraInfo":
			info, ok := e.Value.(bson.D)
			if !ok {
				return newErr(codeTypeMismatch, "failCommand 'errorExtraInfo' must be an object")
			}
			fp.extraInfo = info
		case "failInternalCommands", "failLocalClients":
			fp.internalCmd = truthy(e.Value)
		default:
			return errUnsupported("failCommand option '" + e.Key + "'")
		}
	}
	if fp.block != 0 {
		// checked when the fail point fires, as MongoDB does
		fp.blockErr = newErr(codeInvalidOptions, "must specify 'blockTimeMS' when 'blockConnection' is true")
		if v, ok := lookupField(d, "blockTimeMS"); ok {
			if ms, isNum := asInt64(v); isNum {
				fp.blockErr = nil
				switch {
				case ms < 0:
					fp.blockErr = newErr(codeInvalidOptions, "'blockTimeMS' must be non-negative")
				case ms == 0:
					fp.block = -1 // blocks for no time, but still activates
				default:
					fp.block = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	return nil
}

// matches reports whether the fail point is configured to affect the command
// (MongoDB's shouldActivateFailCommandFailPoint).
func (fp *failCommand) matches(c *conn, name, ns string) bool {
	if name == "configureFailPoint" {
		return false // never affected, even when listed
	}
	if fp.threadName != nil && *fp.threadName != fmt.Sprintf("conn%d", c.id) {
		return false
	}
	if fp.appName != nil && *fp.appName != c.appName {
		return false
	}
	if fp.namespace != nil && *fp.namespace != ns {
		return false
	}
	if fp.all {
		return true
	}
	if aliases, ok := commandAliases[name]; ok {
		for _, a := range aliases {
			if fp.cmds[a] {
				return true
			}
		}
		return false
	}
	return fp.cmds[name]
}

// fire evaluates the fail point for one command whose predicate holds,
// counting the activation and applying the mode.
func (fp *failCommand) fire() bool {
	switch fp.mode {
	case fpOff:
		return false
	case fpTimes:
		fp.n--
		if fp.n <= 0 {
			fp.mode = fpOff
		}
	case fpSkip:
		if fp.n > 0 {
			fp.n--
			return false
		}
	case fpRandom:
		if rand.Float64() >= fp.prob {
			return false
		}
	}
	fp.entered++
	return true
}

// commandNS is the namespace a command operates on, as the fail point's
// namespace option compares it.
func commandNS(name, db string, cmd bson.D) string {
	if name == "getMore" {
		if coll, ok := lookupField(cmd, "collection"); ok {
			if s, ok := coll.(string); ok {
				return db + "." + s
			}
		}
	}
	if s, ok := cmd[0].Value.(string); ok && name != "configureFailPoint" {
		return db + "." + s
	}
	return db + ".$cmd"
}

const failPointMsg = "Failing command via 'failCommand' failpoint"

// evalFailCommand applies failCommand to a command about to run: it may block
// the command (with the server unlocked meanwhile), close the connection or
// fail it with the configured error. It is called with s.mu held and returns
// the error the command fails with, if any.
func (s *Server) evalFailCommand(c *conn, name, db string, cmd bson.D, override func([]string)) error {
	fp := s.failCmd
	if fp == nil || fp.mode == fpOff {
		return nil
	}
	if !fp.closeConn && fp.block == 0 && !fp.hasCode {
		return nil // a writeConcernError alone is applied after the command
	}
	if !fp.matches(c, name, commandNS(name, db, cmd)) || !fp.fire() {
		return nil
	}
	if fp.hasLabels {
		override(fp.labels)
	}
	if fp.blockErr != nil {
		return fp.blockErr
	}
	if fp.block > 0 {
		d := fp.block
		s.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
		}
		s.mu.Lock()
		if s.closed {
			return newErr(codeInterruptedAtShutdown, "interrupted at shutdown")
		}
	}
	if fp.closeConn {
		c.closeNow = true
		return newErr(50985, "%s", failPointMsg)
	}
	if fp.hasCode {
		ce := &cmdError{Code: fp.code, Msg: failPointMsg, Extra: fp.extraInfo}
		return ce
	}
	return nil
}

// failWriteConcern returns the writeConcernError failCommand adds to a
// command that accepts a write concern, if it is configured to.
func (s *Server) failWriteConcern(c *conn, name, db string, cmd bson.D, override func([]string)) bson.D {
	fp := s.failCmd
	if fp == nil || fp.mode == fpOff || fp.wce == nil || !writeConcernCommands[name] {
		return nil
	}
	if !fp.matches(c, name, commandNS(name, db, cmd)) || !fp.fire() {
		return nil
	}
	if fp.hasLabels {
		override(fp.labels)
	}
	return fp.wce
}

// helloAppName reads the application name from the client metadata of a
// handshake.
func helloAppName(cmd bson.D) (string, bool) {
	cv, ok := lookupField(cmd, "client")
	if !ok {
		return "", false
	}
	cd, _ := cv.(bson.D)
	av, _ := lookupField(cd, "application")
	ad, _ := av.(bson.D)
	nv, _ := lookupField(ad, "name")
	n, ok := nv.(string)
	return n, ok
}

// isChangeStreamAggregate reports whether an aggregate command opens a
// change stream.
func isChangeStreamAggregate(cmd bson.D) bool {
	pv, _ := lookupField(cmd, "pipeline")
	p, _ := pv.(bson.A)
	if len(p) == 0 {
		return false
	}
	d, _ := p[0].(bson.D)
	return len(d) == 1 && d[0].Key == "$changeStream"
}
