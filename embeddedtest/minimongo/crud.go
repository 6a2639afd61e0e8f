package minimongo

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// collName returns the collection named by the command's first field.
func (r *request) collName() (string, error) {
	name, ok := r.cmd[0].Value.(string)
	if !ok || name == "" {
		return "", newErr(codeInvalidNamespace, "collection name has invalid type %s", typeName(r.cmd[0].Value))
	}
	return name, nil
}

func (r *request) boolArg(k string, def bool) bool {
	if v, ok := r.arg(k); ok && v != nil {
		return truthy(v)
	}
	return def
}

func (r *request) docArg(k string) (bson.D, error) {
	v, ok := r.arg(k)
	if !ok || v == nil {
		return nil, nil
	}
	d, ok := v.(bson.D)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field '%s.%s' is the wrong type '%s', expected type 'object'", r.name, k, typeName(v))
	}
	return d, nil
}

// rejectOptions fails loudly on options the server does not implement.
func (r *request) rejectOptions(names ...string) error {
	for _, n := range names {
		v, ok := r.arg(n)
		if !ok || v == nil {
			continue
		}
		if n == "collation" {
			if err := checkCollation(v, r.name); err != nil {
				return err
			}
			continue
		}
		if b, isBool := v.(bool); isBool && !b {
			continue
		}
		if d, isDoc := v.(bson.D); isDoc && len(d) == 0 && n != "collation" {
			continue
		}
		return errUnsupported("option '" + n + "' of " + r.name)
	}
	return nil
}

// checkStmtFields refuses a statement field the command does not know, as
// MongoDB's parser does for the whole command.
func checkStmtFields(stmts bson.A, cmd string, allowed ...string) error {
	for _, x := range stmts {
		stmt, ok := x.(bson.D)
		if !ok {
			continue
		}
	next:
		for _, e := range stmt {
			for _, a := range allowed {
				if e.Key == a {
					continue next
				}
			}
			plural := map[string]string{"update": "updates", "delete": "deletes"}[cmd]
			return newErr(codeUnknownField, "BSON field '%s.%s.%s' is an unknown field.", cmd, plural, e.Key)
		}
	}
	return nil
}

// checkCollation accepts the simple collation, {locale: "simple"}, which is how
// this server compares strings (binary), and refuses every other locale loudly.
func checkCollation(v any, where string) error {
	if v == nil {
		return nil
	}
	d, ok := v.(bson.D)
	if !ok {
		return newErr(codeTypeMismatch, "BSON field '%s.collation' is the wrong type '%s', expected type 'object'", where, typeName(v))
	}
	if loc, _ := lookupField(d, "locale"); loc == "simple" && len(d) == 1 {
		return nil
	}
	if _, ok := lookupField(d, "locale"); !ok {
		return newErr(codeFailedToParse, "BSON field 'locale' is missing but a required field")
	}
	return errUnsupported("collation " + formatValue(d) + " of " + where + " (only {locale: \"simple\"})")
}

func stmtRejects(stmt bson.D, cmd string, names ...string) error {
	for _, n := range names {
		if v, ok := lookupField(stmt, n); ok && n == "collation" {
			if err := checkCollation(v, cmd); err != nil {
				return err
			}
			continue
		}
		if v, ok := lookupField(stmt, n); ok && v != nil {
			if d, isDoc := v.(bson.D); isDoc && len(d) == 0 {
				continue
			}
			if a, isArr := v.(bson.A); isArr && len(a) == 0 {
				continue
			}
			return errUnsupported("option '" + n + "' of " + cmd)
		}
	}
	return nil
}

// waitUnlocked blocks a write outside a transaction while a transaction
// holds the document, as MongoDB does.
func (r *request) waitUnlocked(c *collection, key string) error {
	if r.tx != nil {
		return nil
	}
	lk := c.ns() + "\x00" + key
	for r.st.locks[lk] != nil {
		r.s.cond.Wait()
		if r.s.closed {
			return newErr(codeInterruptedAtShutdown, "interrupted at shutdown")
		}
	}
	return nil
}

// uniqueLocks names the lock of each unique index key of doc.
func uniqueLocks(c *collection, doc bson.D) []string {
	var out []string
	for _, ix := range c.indexes {
		if ix.entries == nil {
			continue
		}
		for _, k := range ix.keysOf(doc) {
			out = append(out, c.ns()+"\x00"+ix.name+"\x00"+k.str)
		}
	}
	return out
}

// waitIndexKeys blocks a write outside a transaction while a transaction
// holds one of the unique index keys doc would take. It reports whether it
// waited, in which case the caller re-reads what it decided on.
func (r *request) waitIndexKeys(c *collection, doc bson.D) (bool, error) {
	if r.tx != nil || len(r.st.locks) == 0 {
		return false, nil
	}
	names := uniqueLocks(c, doc)
	waited := false
	for {
		held := false
		for _, n := range names {
			if r.st.locks[n] != nil {
				held = true
				break
			}
		}
		if !held {
			return waited, nil
		}
		waited = true
		r.s.cond.Wait()
		if r.s.closed {
			return waited, newErr(codeInterruptedAtShutdown, "interrupted at shutdown")
		}
	}
}

// maxBSONObjectSize is MongoDB's largest document, as hello reports it.
const maxBSONObjectSize = 16 * 1024 * 1024

// write applies (or, inside a transaction, buffers) one document write. A document larger
// than maxBSONObjectSize is refused with BSONObjectTooLarge, as MongoDB refuses an insert,
// an update or an upsert whose result is too large.
func (r *request) write(c *collection, key string, doc bson.D, ev *event) error {
	if doc != nil {
		if raw, err := bson.Marshal(doc); err == nil && len(raw) > maxBSONObjectSize {
			if ev.op == "insert" {
				return newErr(codeBSONObjectTooLarge, "object to insert too large. size in bytes: %d, max size: %d", len(raw), maxBSONObjectSize)
			}
			return newErr(codeBSONObjectTooLarge, "Resulting document after update is larger than %d", maxBSONObjectSize)
		}
	}
	if c.validation != nil {
		if err := r.validate(c, key, doc); err != nil {
			return err
		}
	}
	ev.db, ev.coll, ev.images, ev.uuid = c.db, c.name, c.prePostImages, c.uuid
	if r.tx != nil {
		if err := r.tx.lock(r.st, c, key); err != nil {
			return err
		}
		// hold the unique keys the document gives up and takes
		names := append(uniqueLocks(c, r.view().get(c, key)), uniqueLocks(c, doc)...)
		for _, n := range names {
			if o := r.st.locks[n]; o != nil && o != r.tx {
				return errWriteConflict()
			}
		}
		for _, n := range names {
			if r.st.locks[n] == nil {
				r.st.locks[n] = r.tx
				r.tx.locks = append(r.tx.locks, n)
			}
		}
		r.tx.put(r.st, c, key, doc)
		r.tx.events = append(r.tx.events, ev)
		return nil
	}
	r.st.ver++
	r.st.commitWrite(c, key, doc, 0)
	r.st.appendEvent(ev)
	return nil
}

// coll returns the named collection of the request's database as the
// request sees it: a transaction also sees the collections it created.
func (r *request) coll(name string) *collection {
	if r.tx != nil && r.tx.newColls != nil {
		if c := r.tx.newColls[r.db+"."+name]; c != nil {
			return c
		}
	}
	return r.st.getColl(r.db, name)
}

// ensureColl returns the named collection of the request's database,
// creating it implicitly. A collection created by a transaction stays private
// to it until it commits: nothing outside sees it, and an abort leaves
// nothing behind.
func (r *request) ensureColl(name string) (*collection, error) {
	c, _, err := r.ensureCollCreated(name)
	return c, err
}

func (r *request) ensureCollCreated(name string) (*collection, bool, error) {
	if r.tx == nil {
		return r.st.ensureColl(r.db, name)
	}
	if c := r.coll(name); c != nil {
		return c, false, nil
	}
	if err := validDBName(r.db); err != nil {
		return nil, false, err
	}
	if err := validCollName(r.db, name); err != nil {
		return nil, false, err
	}
	c := newCollection(r.db, name)
	if r.tx.newColls == nil {
		r.tx.newColls = map[string]*collection{}
	}
	r.tx.newColls[c.ns()] = c
	r.tx.newOrder = append(r.tx.newOrder, c)
	return c, true, nil
}

// dollarKey finds a '$'-prefixed field name in v, at any depth.
func dollarKey(v any) (string, bool) {
	switch x := v.(type) {
	case bson.D:
		for _, e := range x {
			if len(e.Key) > 0 && e.Key[0] == '$' {
				return e.Key, true
			}
			if k, ok := dollarKey(e.Value); ok {
				return k, true
			}
		}
	case bson.A:
		for _, e := range x {
			if k, ok := dollarKey(e); ok {
				return k, true
			}
		}
	}
	return "", false
}

// letVars returns the variables of the command's let option, with NOW and
// CLUSTER_TIME.
func (r *request) letVars() (exprVars, error) {
	vars := exprVars{"NOW": bson.NewDateTimeFromTime(time.Now()), "CLUSTER_TIME": r.st.clusterTime()}
	r.vars = vars
	v, ok := r.arg("let")
	if !ok || v == nil {
		return vars, nil
	}
	d, ok := v.(bson.D)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field '%s.let' is the wrong type '%s', expected type 'object'", r.name, typeName(v))
	}
	for _, e := range d {
		if e.Key == "" || !(e.Key[0] >= 'a' && e.Key[0] <= 'z' || e.Key[0] >= 0x80) {
			return nil, newErr(16870, "'%s' starts with an invalid character for a user variable name", e.Key)
		}
		val, present, err := evalExprV(e.Value, bson.D{}, vars)
		if err != nil {
			return nil, err
		}
		if !present {
			val = nil
		}
		vars[e.Key] = val
	}
	r.vars = vars
	return vars, nil
}

// prepareInsert gives doc an _id (first) and validates it.
func prepareInsert(doc bson.D) (bson.D, any, error) {
	id, ok := lookupField(doc, "_id")
	if !ok {
		id = bson.NewObjectID()
		return append(bson.D{{Key: "_id", Value: id}}, doc...), id, nil
	}
	switch x := id.(type) {
	case bson.A:
		return nil, nil, newErr(codeInvalidIdField, "The '_id' value cannot be of type array")
	case bson.Regex:
		return nil, nil, newErr(codeInvalidIdField, "can't use a regex for _id")
	case bson.D:
		if k, ok := dollarKey(x); ok {
			return nil, nil, newErr(codeDollarPrefixedField, "_id fields may not contain '$'-prefixed fields: %s is not valid for storage.", k)
		}
	}
	if doc[0].Key != "_id" {
		out := bson.D{{Key: "_id", Value: id}}
		for _, e := range doc {
			if e.Key != "_id" {
				out = append(out, e)
			}
		}
		doc = out
	}
	return doc, id, nil
}

func (r *request) insertDoc(c *collection, doc bson.D) (any, error) {
	doc, id, err := prepareInsert(doc)
	if err != nil {
		return nil, err
	}
	key := idKey(id)
	for {
		if err := r.waitUnlocked(c, key); err != nil {
			return nil, err
		}
		waited, err := r.waitIndexKeys(c, doc)
		if err != nil {
			return nil, err
		}
		if !waited {
			break
		}
	}
	v := r.view()
	if v.get(c, key) != nil {
		return nil, dupKeyError(c, c.indexes[0], bson.D{{Key: "_id", Value: id}})
	}
	if err := r.st.checkUnique(v, c, key, doc); err != nil {
		return nil, err
	}
	return id, r.write(c, key, doc, &event{op: "insert", docKey: bson.D{{Key: "_id", Value: id}}, fullDoc: doc})
}

// topLevelError reports errors that abort a whole command inside a
// transaction instead of being listed in writeErrors.
func (r *request) topLevelError(err error) bool {
	ce := asCmdError(err)
	return ce.Code == codeWriteConflict || ce.Code == codeInterruptedAtShutdown || (r.tx != nil && len(ce.Labels) > 0)
}

func cmdInsert(r *request) (bson.D, error) {
	if err := r.checkFields("documents", "ordered", "bypassDocumentValidation"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	docsV, _ := r.arg("documents")
	docs, ok := docsV.(bson.A)
	if !ok {
		return nil, newErr(codeFailedToParse, "BSON field 'insert.documents' is missing but a required field")
	}
	ordered := r.boolArg("ordered", true)
	c, err := r.ensureColl(name)
	if err != nil {
		return nil, err
	}
	n := int32(0)
	var werrs bson.A
	for i, x := range docs {
		d, ok := x.(bson.D)
		if !ok {
			return nil, newErr(codeTypeMismatch, "documents must be objects")
		}
		if _, err := r.insertDoc(c, d); err != nil {
			if r.topLevelError(err) {
				return nil, err
			}
			werrs = append(werrs, writeErrorDoc(i, err))
			if ordered {
				break
			}
			continue
		}
		n++
	}
	reply := bson.D{{Key: "n", Value: n}}
	if werrs != nil {
		reply = append(reply, bson.E{Key: "writeErrors", Value: werrs})
	}
	return okReply(reply...), nil
}

type updateResult struct {
	matched  int32
	modified int32
	upserted any
	hasUpsrt bool
	oldDoc   bson.D
	newDoc   bson.D
}

// updateDocs executes one update statement.
func (r *request) updateDocs(name string, q, u bson.D, uAny any, upsert, multi bool, sortSpec bson.D, opts updateOpts) (*updateResult, error) {
	spec, err := parseUpdateWith(uAny, opts)
	if err != nil {
		return nil, err
	}
	if multi && spec.isRepl {
		return nil, newErr(codeFailedToParse, "multi update is not supported for replacement-style update")
	}
	m, err := compileFilterV(q, r.vars)
	if err != nil {
		return nil, err
	}
	res := &updateResult{}
	c := r.coll(name)
	if c != nil {
		v := r.view()
		var matched []keyedDoc
		for _, kd := range v.candidates(c, q) {
			if m(kd.doc) {
				matched = append(matched, kd)
			}
		}
		if sortSpec != nil && len(matched) > 1 {
			keys, err := parseSort(sortSpec)
			if err != nil {
				return nil, err
			}
			docs := make([]bson.D, len(matched))
			byDoc := map[*bson.E]keyedDoc{}
			for i, kd := range matched {
				docs[i] = kd.doc
				if len(kd.doc) > 0 {
					byDoc[&kd.doc[0]] = kd
				}
			}
			sortDocs(docs, keys)
			for i, d := range docs {
				matched[i] = byDoc[&d[0]]
			}
		}
		for _, kd := range matched {
			var doc, nd bson.D
			for {
				if err := r.waitUnlocked(c, kd.key); err != nil {
					return nil, err
				}
				if doc = r.view().get(c, kd.key); doc == nil || !m(doc) {
					doc = nil
					break
				}
				rs, err := spec.resolve(doc, q, false)
				if err != nil {
					return nil, err
				}
				if nd, err = rs.apply(doc, false); err != nil {
					return nil, err
				}
				waited, err := r.waitIndexKeys(c, nd)
				if err != nil {
					return nil, err
				}
				if !waited {
					break
				}
			}
			if doc == nil {
				continue
			}
			res.matched++
			res.oldDoc, res.newDoc = doc, nd
			if !sameBytes(doc, nd) {
				if err := r.st.checkUnique(r.view(), c, kd.key, nd); err != nil {
					return nil, err
				}
				ev := &event{op: "update", docKey: docKeyOf(doc), fullDoc: nd, preImage: doc}
				if spec.isRepl {
					ev.op = "replace"
				} else {
					ev.updDesc, ev.disamb = updateDescription(doc, nd)
				}
				if err := r.write(c, kd.key, nd, ev); err != nil {
					return nil, err
				}
				res.modified++
			}
			if !multi {
				break
			}
		}
	}
	if res.matched > 0 || !upsert {
		return res, nil
	}
	var seed bson.D
	if seed, err = upsertSeed(q); err != nil {
		return nil, err
	}
	if spec.isRepl {
		// a replacement keeps only the _id of the filter
		id, ok := lookupField(seed, "_id")
		seed = bson.D{}
		if ok {
			seed = bson.D{{Key: "_id", Value: id}}
		}
	}
	rs, err := spec.resolve(seed, q, true)
	if err != nil {
		return nil, err
	}
	nd, err := rs.apply(seed, true)
	if err != nil {
		return nil, err
	}
	if c == nil {
		if c, err = r.ensureColl(name); err != nil {
			return nil, err
		}
	}
	id, err := r.insertDoc(c, nd)
	if err != nil {
		return nil, err
	}
	res.upserted, res.hasUpsrt = id, true
	res.newDoc = r.view().get(c, idKey(id))
	return res, nil
}

func cmdUpdate(r *request) (bson.D, error) {
	if err := r.checkFields("updates", "ordered", "bypassDocumentValidation", "let"); err != nil {
		return nil, err
	}
	vars, err := r.letVars()
	if err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	stmtsV, _ := r.arg("updates")
	stmts, ok := stmtsV.(bson.A)
	if !ok {
		return nil, newErr(codeFailedToParse, "BSON field 'update.updates' is missing but a required field")
	}
	// MongoDB parses the whole command before running any statement: an unknown
	// field in any statement fails the command (40415), not that statement
	if err := checkStmtFields(stmts, "update", "q", "u", "c", "upsert", "multi", "arrayFilters", "hint", "collation", "upsertSupplied"); err != nil {
		return nil, err
	}
	ordered := r.boolArg("ordered", true)
	var n, nMod int32
	var upserted, werrs bson.A
	for i, x := range stmts {
		stmt, ok := x.(bson.D)
		if !ok {
			return nil, newErr(codeTypeMismatch, "update statements must be objects")
		}
		res, err := r.updateStmt(name, stmt, vars)
		if err != nil {
			if r.topLevelError(err) {
				return nil, err
			}
			werrs = append(werrs, writeErrorDoc(i, err))
			if ordered {
				break
			}
			continue
		}
		n += res.matched
		nMod += res.modified
		if res.hasUpsrt {
			n++
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(i)}, {Key: "_id", Value: res.upserted}})
		}
	}
	reply := bson.D{{Key: "n", Value: n}}
	if upserted != nil {
		reply = append(reply, bson.E{Key: "upserted", Value: upserted})
	}
	reply = append(reply, bson.E{Key: "nModified", Value: nMod})
	if werrs != nil {
		reply = append(reply, bson.E{Key: "writeErrors", Value: werrs})
	}
	return okReply(reply...), nil
}

func (r *request) updateStmt(name string, stmt bson.D, vars exprVars) (*updateResult, error) {
	var q bson.D
	var u any
	var upsert, multi bool
	var sortSpec bson.D
	opts := updateOpts{vars: vars}
	for _, e := range stmt {
		switch e.Key {
		case "q":
			d, ok := e.Value.(bson.D)
			if !ok {
				return nil, newErr(codeTypeMismatch, "BSON field 'update.updates.q' is the wrong type '%s', expected type 'object'", typeName(e.Value))
			}
			q = d
		case "u":
			u = e.Value
		case "upsert":
			upsert = truthy(e.Value)
		case "multi":
			multi = truthy(e.Value)
		case "hint":
			if err := r.checkHint(name, e.Value); err != nil {
				return nil, err
			}
		case "arrayFilters":
			if e.Value != nil {
				a, ok := e.Value.(bson.A)
				if !ok {
					return nil, newErr(codeTypeMismatch, "BSON field 'update.updates.arrayFilters' is the wrong type '%s', expected type 'array'", typeName(e.Value))
				}
				opts.arrayFilters = a
			}
		case "collation", "c", "upsertSupplied":
			if err := stmtRejects(stmt, "update", e.Key); err != nil {
				return nil, err
			}
		default:
			return nil, newErr(codeUnknownField, "BSON field 'update.updates.%s' is an unknown field.", e.Key)
		}
	}
	if u == nil {
		return nil, newErr(codeFailedToParse, "BSON field 'update.updates.u' is missing but a required field")
	}
	ud, _ := u.(bson.D)
	return r.updateDocs(name, q, ud, u, upsert, multi, sortSpec, opts)
}

func cmdDelete(r *request) (bson.D, error) {
	if err := r.checkFields("deletes", "ordered", "let"); err != nil {
		return nil, err
	}
	if _, err := r.letVars(); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	stmtsV, _ := r.arg("deletes")
	stmts, ok := stmtsV.(bson.A)
	if !ok {
		return nil, newErr(codeFailedToParse, "BSON field 'delete.deletes' is missing but a required field")
	}
	if err := checkStmtFields(stmts, "delete", "q", "limit", "hint", "collation"); err != nil {
		return nil, err
	}
	ordered := r.boolArg("ordered", true)
	var n int32
	var werrs bson.A
	for i, x := range stmts {
		stmt, _ := x.(bson.D)
		k, err := r.deleteStmt(name, stmt)
		if err != nil {
			if r.topLevelError(err) {
				return nil, err
			}
			werrs = append(werrs, writeErrorDoc(i, err))
			if ordered {
				break
			}
			continue
		}
		n += k
	}
	reply := bson.D{{Key: "n", Value: n}}
	if werrs != nil {
		reply = append(reply, bson.E{Key: "writeErrors", Value: werrs})
	}
	return okReply(reply...), nil
}

func (r *request) deleteStmt(name string, stmt bson.D) (int32, error) {
	var q bson.D
	limit := int64(-1)
	for _, e := range stmt {
		switch e.Key {
		case "q":
			d, ok := e.Value.(bson.D)
			if !ok {
				return 0, newErr(codeTypeMismatch, "BSON field 'delete.deletes.q' is the wrong type '%s', expected type 'object'", typeName(e.Value))
			}
			q = d
		case "limit":
			n, ok := asInt64(e.Value)
			if !ok || (n != 0 && n != 1) {
				return 0, newErr(codeFailedToParse, "The limit field in delete objects must be 0 or 1. Got %s", formatValue(e.Value))
			}
			limit = n
		case "hint":
			if err := r.checkHint(name, e.Value); err != nil {
				return 0, err
			}
		case "collation":
			if err := stmtRejects(stmt, "delete", e.Key); err != nil {
				return 0, err
			}
		default:
			return 0, newErr(codeUnknownField, "BSON field 'delete.deletes.%s' is an unknown field.", e.Key)
		}
	}
	if limit < 0 {
		return 0, newErr(codeFailedToParse, "BSON field 'delete.deletes.limit' is missing but a required field")
	}
	m, err := compileFilterV(q, r.vars)
	if err != nil {
		return 0, err
	}
	c := r.coll(name)
	if c == nil {
		return 0, nil
	}
	var n int32
	for _, kd := range r.view().candidates(c, q) {
		if !m(kd.doc) {
			continue
		}
		if err := r.waitUnlocked(c, kd.key); err != nil {
			return n, err
		}
		doc := r.view().get(c, kd.key)
		if doc == nil || !m(doc) {
			continue
		}
		if err := r.write(c, kd.key, nil, &event{op: "delete", docKey: docKeyOf(doc), preImage: doc}); err != nil {
			return n, err
		}
		n++
		if limit == 1 {
			break
		}
	}
	return n, nil
}

// checkHint fails when a hint names no existing index.
func (r *request) checkHint(coll string, hint any) error {
	c := r.coll(coll)
	if c == nil || hint == nil {
		return nil
	}
	for _, ix := range c.indexes {
		switch h := hint.(type) {
		case string:
			if h == ix.name {
				return nil
			}
		case bson.D:
			if len(h) == 0 || valuesEqual(h, ix.keys) {
				return nil
			}
		}
	}
	if s, ok := hint.(string); ok && s == "$natural" {
		return nil
	}
	if d, ok := hint.(bson.D); ok && len(d) == 1 && d[0].Key == "$natural" {
		return nil
	}
	return errBadValue("hint provided does not correspond to an existing index")
}

// query runs filter/sort/skip/limit over a collection.
func (r *request) query(name string, filter, sortSpec bson.D, skip, limit int64) ([]bson.D, error) {
	m, err := compileFilterV(filter, r.vars)
	if err != nil {
		return nil, err
	}
	var keys []sortKey
	if len(sortSpec) > 0 {
		if keys, err = parseSort(sortSpec); err != nil {
			return nil, err
		}
	}
	c := r.coll(name)
	if c == nil {
		return nil, nil
	}
	var out []bson.D
	for _, kd := range r.view().candidates(c, filter) {
		if m(kd.doc) {
			out = append(out, kd.doc)
		}
	}
	if keys != nil {
		sortDocs(out, keys)
	}
	if skip > 0 {
		if skip >= int64(len(out)) {
			return nil, nil
		}
		out = out[skip:]
	}
	if limit > 0 && int64(len(out)) > limit {
		out = out[:limit]
	}
	return out, nil
}

func numArg(r *request, k string) (int64, error) {
	v, ok := r.arg(k)
	if !ok || v == nil {
		return 0, nil
	}
	n, ok := asInt64(v)
	if !ok {
		return 0, newErr(codeTypeMismatch, "BSON field '%s.%s' is the wrong type '%s', expected types '[long, int, decimal, double]'", r.name, k, typeName(v))
	}
	return n, nil
}

func cmdFind(r *request) (bson.D, error) {
	if err := r.checkFields("filter", "sort", "projection", "skip", "limit", "batchSize", "singleBatch",
		"hint", "max", "min", "returnKey", "showRecordId", "tailable", "awaitData", "noCursorTimeout",
		"allowPartialResults", "collation", "allowDiskUse", "let", "oplogReplay", "readOnce"); err != nil {
		return nil, err
	}
	if err := r.rejectOptions("max", "min", "returnKey", "showRecordId", "tailable", "awaitData", "collation", "oplogReplay"); err != nil {
		return nil, err
	}
	if _, err := r.letVars(); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	filter, err := r.docArg("filter")
	if err != nil {
		return nil, err
	}
	sortSpec, err := r.docArg("sort")
	if err != nil {
		return nil, err
	}
	proj, err := r.docArg("projection")
	if err != nil {
		return nil, err
	}
	skip, err := numArg(r, "skip")
	if err != nil {
		return nil, err
	}
	if skip < 0 {
		return nil, errBadValue("skip value must be non-negative, but received: " + itoa(skip))
	}
	limit, err := numArg(r, "limit")
	if err != nil {
		return nil, err
	}
	single := r.boolArg("singleBatch", false)
	if limit < 0 {
		return nil, errBadValue("limit value must be non-negative, but received: " + itoa(limit))
	}
	batch := batchSizeOf(r, "")
	if batch < -1 {
		return nil, errBadValue("batchSize value must be non-negative")
	}
	if h, ok := r.arg("hint"); ok {
		if err := r.checkHint(name, h); err != nil {
			return nil, err
		}
	}
	var p *projection
	if len(proj) > 0 {
		if p, err = parseProjection(proj); err != nil {
			return nil, err
		}
	}
	docs, err := r.query(name, filter, sortSpec, skip, limit)
	if err != nil {
		return nil, err
	}
	if p != nil {
		for i, d := range docs {
			if docs[i], err = p.apply(d); err != nil {
				return nil, err
			}
		}
	}
	if limit > 0 && batch < 0 {
		batch = defaultFirstBatch
	}
	reply, err := r.cursorReply(r.db+"."+name, docs, batch, single)
	if err == nil && r.boolArg("noCursorTimeout", false) {
		if id := replyCursorID(reply); id != 0 {
			r.st.cursors[id].noTimeout = true
		}
	}
	return reply, err
}

func replyCursorID(reply bson.D) int64 {
	cur, _ := lookupField(reply, "cursor")
	d, _ := cur.(bson.D)
	id, _ := lookupField(d, "id")
	n, _ := id.(int64)
	return n
}

func cmdCount(r *request) (bson.D, error) {
	if err := r.checkFields("query", "limit", "skip", "hint", "collation", "fields"); err != nil {
		return nil, err
	}
	if err := r.rejectOptions("collation"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	q, err := r.docArg("query")
	if err != nil {
		return nil, err
	}
	skip, err := numArg(r, "skip")
	if err != nil {
		return nil, err
	}
	limit, err := numArg(r, "limit")
	if err != nil {
		return nil, err
	}
	if limit < 0 {
		limit = -limit
	}
	if h, ok := r.arg("hint"); ok {
		if err := r.checkHint(name, h); err != nil {
			return nil, err
		}
	}
	docs, err := r.query(name, q, nil, skip, limit)
	if err != nil {
		return nil, err
	}
	return okReply(bson.E{Key: "n", Value: int32(len(docs))}), nil
}

func cmdDistinct(r *request) (bson.D, error) {
	if err := r.checkFields("key", "query", "collation", "hint"); err != nil {
		return nil, err
	}
	if err := r.rejectOptions("collation"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	kv, _ := r.arg("key")
	key, ok := kv.(string)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field 'distinct.key' is the wrong type '%s', expected type 'string'", typeName(kv))
	}
	q, err := r.docArg("query")
	if err != nil {
		return nil, err
	}
	docs, err := r.query(name, q, nil, 0, 0)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	values := bson.A{}
	add := func(v any) {
		k := keyString(v)
		if !seen[k] {
			seen[k] = true
			values = append(values, v)
		}
	}
	for _, d := range docs {
		for _, v := range traverse(d, key) {
			if a, ok := v.(bson.A); ok {
				for _, e := range a {
					add(e)
				}
			} else {
				add(v)
			}
		}
	}
	sortValues(values)
	return okReply(bson.E{Key: "values", Value: values}), nil
}

func sortValues(a bson.A) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && compareValues(a[j-1], a[j]) > 0; j-- {
			a[j-1], a[j] = a[j], a[j-1]
		}
	}
}

func cmdFindAndModify(r *request) (bson.D, error) {
	r.name = "findAndModify"
	if err := r.checkFields("query", "sort", "remove", "update", "new", "fields", "upsert",
		"bypassDocumentValidation", "collation", "arrayFilters", "hint", "let"); err != nil {
		return nil, err
	}
	if err := r.rejectOptions("collation"); err != nil {
		return nil, err
	}
	vars, err := r.letVars()
	if err != nil {
		return nil, err
	}
	opts := updateOpts{vars: vars}
	if af, ok := r.arg("arrayFilters"); ok && af != nil {
		a, isArr := af.(bson.A)
		if !isArr {
			return nil, newErr(codeTypeMismatch, "BSON field 'findAndModify.arrayFilters' is the wrong type '%s', expected type 'array'", typeName(af))
		}
		opts.arrayFilters = a
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	q, err := r.docArg("query")
	if err != nil {
		return nil, err
	}
	sortSpec, err := r.docArg("sort")
	if err != nil {
		return nil, err
	}
	fields, err := r.docArg("fields")
	if err != nil {
		return nil, err
	}
	remove := r.boolArg("remove", false)
	upd, hasUpd := r.arg("update")
	retNew := r.boolArg("new", false)
	upsert := r.boolArg("upsert", false)
	switch {
	case remove && hasUpd:
		return nil, newErr(codeFailedToParse, "Cannot specify both an update and remove=true")
	case !remove && !hasUpd:
		return nil, newErr(codeFailedToParse, "Either an update or remove=true must be specified")
	case remove && retNew:
		return nil, newErr(codeFailedToParse, "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document")
	case remove && upsert:
		return nil, newErr(codeFailedToParse, "Cannot specify both upsert=true and remove=true")
	}
	if h, ok := r.arg("hint"); ok {
		if err := r.checkHint(name, h); err != nil {
			return nil, err
		}
	}
	var p *projection
	if len(fields) > 0 {
		if p, err = parseProjection(fields); err != nil {
			return nil, err
		}
	}
	project := func(d bson.D) (any, error) {
		if d == nil {
			return nil, nil
		}
		if p == nil {
			return d, nil
		}
		return p.apply(d)
	}
	lastErr := bson.D{}
	var value any
	if remove {
		docs, err := r.query(name, q, sortSpec, 0, 1)
		if err != nil {
			return nil, err
		}
		n := int32(0)
		if len(docs) > 0 {
			c := r.coll(name)
			id, _ := lookupField(docs[0], "_id")
			key := idKey(id)
			if err := r.waitUnlocked(c, key); err != nil {
				return nil, err
			}
			if cur := r.view().get(c, key); cur != nil {
				if err := r.write(c, key, nil, &event{op: "delete", docKey: docKeyOf(cur), preImage: cur}); err != nil {
					return nil, err
				}
				n = 1
				if value, err = project(cur); err != nil {
					return nil, err
				}
			}
		}
		lastErr = bson.D{{Key: "n", Value: n}}
	} else {
		filter := q
		if len(sortSpec) > 0 {
			// pick the first document in sort order, then update exactly it
			docs, err := r.query(name, q, sortSpec, 0, 1)
			if err != nil {
				return nil, err
			}
			if len(docs) > 0 {
				id, _ := lookupField(docs[0], "_id")
				filter = append(bson.D{{Key: "_id", Value: id}}, q...)
			}
		}
		ud, _ := upd.(bson.D)
		res, err := r.updateDocs(name, filter, ud, upd, upsert, false, nil, opts)
		if err != nil {
			return nil, err
		}
		if res.hasUpsrt {
			lastErr = bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: false}, {Key: "upserted", Value: res.upserted}}
			if retNew {
				value, err = project(res.newDoc)
			}
		} else {
			lastErr = bson.D{{Key: "n", Value: res.matched}, {Key: "updatedExisting", Value: res.matched > 0}}
			if res.matched > 0 {
				if retNew {
					value, err = project(res.newDoc)
				} else {
					value, err = project(res.oldDoc)
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return okReply(bson.E{Key: "lastErrorObject", Value: lastErr}, bson.E{Key: "value", Value: value}), nil
}

func cmdAggregate(r *request) (bson.D, error) {
	if err := r.checkFields("pipeline", "cursor", "allowDiskUse", "explain", "bypassDocumentValidation",
		"collation", "hint", "let", "needsMerge", "fromMongos"); err != nil {
		return nil, err
	}
	if err := r.rejectOptions("explain", "collation", "needsMerge", "fromMongos"); err != nil {
		return nil, err
	}
	vars, err := r.letVars()
	if err != nil {
		return nil, err
	}
	var name string
	switch v := r.cmd[0].Value.(type) {
	case string:
		name = v
	default:
		if n, ok := asInt64(v); !ok || n != 1 {
			return nil, newErr(codeFailedToParse, "Invalid {aggregate: %s}: the aggregate field must be a collection name or 1", formatValue(v))
		}
	}
	pv, _ := r.arg("pipeline")
	pipeline, ok := pv.(bson.A)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field 'aggregate.pipeline' is the wrong type '%s', expected type 'array'", typeName(pv))
	}
	if _, ok := r.arg("cursor"); !ok {
		return nil, newErr(codeFailedToParse, "The 'cursor' option is required, except for aggregate with the explain argument")
	}
	if len(pipeline) > 0 {
		if d, ok := pipeline[0].(bson.D); ok && len(d) == 1 && d[0].Key == "$changeStream" {
			return r.openChangeStream(name, d[0].Value, pipeline[1:])
		}
	}
	pipeline, out, err := r.splitOutput(pipeline)
	if err != nil {
		return nil, err
	}
	var source []bson.D
	hasSource := false
	if name == "" {
		if source, pipeline, hasSource, err = r.sourceStage(pipeline, vars); err != nil {
			return nil, err
		}
	}
	stages, err := parsePipelineV(pipeline, func(coll string) []bson.D {
		c := r.coll(coll)
		if c == nil {
			return nil
		}
		var docs []bson.D
		for _, kd := range r.view().all(c) {
			docs = append(docs, kd.doc)
		}
		return docs
	}, vars)
	if err != nil {
		return nil, err
	}
	if name == "" && !hasSource {
		return nil, errUnsupported("database-level aggregation other than $changeStream, $documents and $listLocalSessions")
	}
	if h, ok := r.arg("hint"); ok && name != "" {
		if err := r.checkHint(name, h); err != nil {
			return nil, err
		}
	}
	docs := source
	if c := r.coll(name); c != nil && name != "" {
		for _, kd := range r.view().all(c) {
			docs = append(docs, kd.doc)
		}
	}
	docs, err = runStages(docs, stages)
	if err != nil {
		return nil, err
	}
	ns := r.db + "." + name
	if name == "" {
		ns = r.db + ".$cmd.aggregate"
	}
	if out != nil {
		if err := r.writeOutput(out, docs); err != nil {
			return nil, err
		}
		docs = nil
	}
	return r.cursorReply(ns, docs, batchSizeOf(r, "cursor"), false)
}

func cmdCreateIndexes(r *request) (bson.D, error) {
	if err := r.checkFields("indexes", "commitQuorum", "ignoreUnknownIndexOptions"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	iv, _ := r.arg("indexes")
	specs, ok := iv.(bson.A)
	if !ok || len(specs) == 0 {
		return nil, newErr(codeFailedToParse, "Must specify at least one index to create")
	}
	var parsed []*index
	for _, x := range specs {
		d, ok := x.(bson.D)
		if !ok {
			return nil, newErr(codeTypeMismatch, "The elements of the 'indexes' array must be objects")
		}
		ix, err := parseIndexSpec(d)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, ix)
	}
	c, created, err := r.ensureCollCreated(name)
	if err != nil {
		return nil, err
	}
	if r.tx != nil && r.tx.newColls[c.ns()] != c {
		return nil, newErr(codeOperationNotSupportedInTx, "Cannot create new indexes on existing collection %s in a multi-document transaction.", c.ns())
	}
	before := int32(len(c.indexes))
	var added []*index
	for _, ix := range parsed {
		exists := false
		for _, old := range c.indexes {
			sameKeys := valuesEqual(old.keys, ix.keys)
			switch {
			case old.name == ix.name && sameKeys && old.sameOptions(ix):
				exists = true
			case old.name == ix.name:
				return nil, newErr(codeIndexKeySpecsConflict, "An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: %s, existing index: %s", formatValue(ix.spec), formatValue(old.spec))
			case sameKeys && old.sameOptions(ix):
				return nil, newErr(codeIndexOptionsConflict, "Index already exists with a different name: %s", old.name)
			case sameKeys && old.unique != ix.unique:
				return nil, newErr(codeIndexKeySpecsConflict, "An existing index has the same key pattern as the requested index but different uniqueness: %s", old.name)
			case sameKeys && old.partial == nil && ix.partial == nil:
				return nil, newErr(codeIndexOptionsConflict, "An equivalent index already exists with the same name but different options. Requested index: %s, existing index: %s", formatValue(ix.spec), formatValue(old.spec))
			}
			if exists {
				break
			}
		}
		if exists {
			continue
		}
		if err := r.st.buildIndex(c, ix); err != nil {
			return nil, err
		}
		c.indexes = append(c.indexes, ix)
		added = append(added, ix)
	}
	reply := bson.D{
		{Key: "numIndexesBefore", Value: before},
		{Key: "numIndexesAfter", Value: int32(len(c.indexes))},
	}
	if len(added) == 0 {
		reply = append(reply, bson.E{Key: "note", Value: "all indexes already exist"})
	}
	reply = append(reply, bson.E{Key: "createdCollectionAutomatically", Value: created})
	if len(added) > 0 && r.tx == nil {
		specs := bson.A{}
		for _, ix := range added {
			specs = append(specs, ix.spec)
		}
		r.st.appendEvent(&event{op: "createIndexes", db: c.db, coll: c.name, uuid: c.uuid, opDesc: bson.D{{Key: "indexes", Value: specs}}})
	}
	return okReply(reply...), nil
}

func cmdListIndexes(r *request) (bson.D, error) {
	if err := r.checkFields("cursor"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	c := r.coll(name)
	if c == nil {
		return nil, newErr(codeNamespaceNotFound, "ns does not exist: %s.%s", r.db, name)
	}
	docs := make([]bson.D, len(c.indexes))
	for i, ix := range c.indexes {
		docs[i] = ix.spec
	}
	return r.cursorReply(r.db+"."+name, docs, batchSizeOf(r, "cursor"), false)
}

func cmdDropIndexes(r *request) (bson.D, error) {
	if err := r.checkFields("index"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	c := r.coll(name)
	if c == nil {
		return nil, newErr(codeNamespaceNotFound, "ns not found %s.%s", r.db, name)
	}
	was := int32(len(c.indexes))
	before := append([]*index(nil), c.indexes...)
	defer func() {
		dropped := bson.A{}
		for _, ix := range before {
			found := false
			for _, x := range c.indexes {
				found = found || x == ix
			}
			if !found {
				dropped = append(dropped, ix.spec)
			}
		}
		if len(dropped) > 0 {
			r.st.appendEvent(&event{op: "dropIndexes", db: c.db, coll: c.name, uuid: c.uuid, opDesc: bson.D{{Key: "indexes", Value: dropped}}})
		}
	}()
	spec, _ := r.arg("index")
	drop := func(match func(ix *index) bool, desc string) error {
		for i, ix := range c.indexes {
			if match(ix) {
				if ix.name == "_id_" {
					return newErr(codeInvalidOptions, "cannot drop _id index")
				}
				c.indexes = append(c.indexes[:i:i], c.indexes[i+1:]...)
				return nil
			}
		}
		return newErr(codeIndexNotFound, "index not found with name [%s]", desc)
	}
	switch s := spec.(type) {
	case string:
		if s == "*" {
			c.indexes = c.indexes[:1]
			break
		}
		if err := drop(func(ix *index) bool { return ix.name == s }, s); err != nil {
			return nil, err
		}
	case bson.A:
		for _, x := range s {
			n, _ := x.(string)
			if err := drop(func(ix *index) bool { return ix.name == n }, n); err != nil {
				return nil, err
			}
		}
	case bson.D:
		if err := drop(func(ix *index) bool { return valuesEqual(ix.keys, s) }, formatValue(s)); err != nil {
			return nil, newErr(codeIndexNotFound, "can't find index with key: %s", formatValue(s))
		}
	default:
		return nil, newErr(codeTypeMismatch, "BSON field 'dropIndexes.index' is the wrong type '%s'", typeName(spec))
	}
	return okReply(bson.E{Key: "nIndexesWas", Value: was}), nil
}
