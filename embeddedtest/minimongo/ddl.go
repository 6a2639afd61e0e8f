package minimongo

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// validation is a collection's document validator.
type validation struct {
	validator bson.D
	match     matcher
	level     string // strict (default), moderate or off
	action    string // error (default) or warn
}

// parseValidation reads validator, validationLevel and validationAction from
// a create or collMod command into v.
func parseValidation(r *request, v *validation) error {
	if x, ok := r.arg("validator"); ok {
		d, isDoc := x.(bson.D)
		if !isDoc {
			return newErr(codeTypeMismatch, "BSON field '%s.validator' is the wrong type '%s', expected type 'object'", r.name, typeName(x))
		}
		m, err := compileValidator(d)
		if err != nil {
			return err
		}
		v.validator, v.match = d, m
	}
	if x, ok := r.arg("validationLevel"); ok {
		switch x {
		case "off", "strict", "moderate":
			v.level = x.(string)
		default:
			return errBadValue("Enumeration value '" + stringOf(x) + "' for field 'validationLevel' is not a valid value.")
		}
	}
	if x, ok := r.arg("validationAction"); ok {
		switch x {
		case "error", "warn":
			v.action = x.(string)
		default:
			return errBadValue("Enumeration value '" + stringOf(x) + "' for field 'validationAction' is not a valid value.")
		}
	}
	return nil
}

// compileValidator compiles a validator's query filter.
func compileValidator(d bson.D) (matcher, error) {
	for _, e := range d {
		switch e.Key {
		case "$jsonSchema", "$expr", "$where", "$text", "$near", "$nearSphere":
			return nil, errUnsupported("validator operator " + e.Key)
		}
	}
	return compileFilter(d)
}

// validate checks a document about to be written under key, as MongoDB's
// document validation does: strict checks every write, moderate only writes
// to documents that were valid, warn only logs.
func (r *request) validate(c *collection, key string, doc bson.D) error {
	v := c.validation
	if v == nil || v.match == nil || doc == nil || v.level == "off" || r.boolArg("bypassDocumentValidation", false) {
		return nil
	}
	if v.match(doc) {
		return nil
	}
	if v.level == "moderate" {
		if old := r.view().get(c, key); old != nil && !v.match(old) {
			return nil
		}
	}
	id, _ := lookupField(doc, "_id")
	if v.action == "warn" {
		r.s.log.Warn("minimongo: document failed validation", "ns", c.ns(), "_id", formatValue(id))
		return nil
	}
	return &cmdError{Code: codeDocumentValidation, Msg: "Document failed validation",
		Extra: bson.D{{Key: "errInfo", Value: bson.D{{Key: "failingDocumentId", Value: id}}}}}
}

// options returns the collection's options as listCollections reports them.
func (c *collection) options() bson.D {
	opts := bson.D{}
	if v := c.validation; v != nil {
		if v.validator != nil {
			opts = append(opts, bson.E{Key: "validator", Value: v.validator})
		}
		if v.level != "" {
			opts = append(opts, bson.E{Key: "validationLevel", Value: v.level})
		}
		if v.action != "" {
			opts = append(opts, bson.E{Key: "validationAction", Value: v.action})
		}
	}
	if c.prePostImages {
		opts = append(opts, bson.E{Key: "changeStreamPreAndPostImages", Value: bson.D{{Key: "enabled", Value: true}}})
	}
	return opts
}

func cmdCollMod(r *request) (bson.D, error) {
	if err := r.checkFields("changeStreamPreAndPostImages", "validator", "validationLevel", "validationAction",
		"index", "expireAfterSeconds", "viewOn", "pipeline", "timeseries", "clusteredIndex", "cappedSize", "cappedMax",
		"recordIdsReplicated", "dryRun", "prepareUnique", "hidden"); err != nil {
		return nil, err
	}
	name, err := r.collName()
	if err != nil {
		return nil, err
	}
	for _, e := range r.cmd[1:] {
		switch {
		case genericFields[e.Key]:
		case e.Key == "changeStreamPreAndPostImages", e.Key == "validator", e.Key == "validationLevel", e.Key == "validationAction":
		default:
			return nil, errUnsupported("collMod option " + e.Key)
		}
	}
	c := r.st.getColl(r.db, name)
	if c == nil {
		return nil, newErr(codeNamespaceNotFound, "ns does not exist: %s.%s", r.db, name)
	}
	v := validation{}
	if c.validation != nil {
		v = *c.validation
	}
	if err := parseValidation(r, &v); err != nil {
		return nil, err
	}
	images := c.prePostImages
	if x, ok := r.arg("changeStreamPreAndPostImages"); ok {
		d, isDoc := x.(bson.D)
		en, has := lookupField(d, "enabled")
		if !isDoc || !has || len(d) != 1 {
			return nil, newErr(codeFailedToParse, "BSON field 'collMod.changeStreamPreAndPostImages.enabled' is missing but a required field")
		}
		images = truthy(en)
	}
	c.validation = &v
	c.prePostImages = images
	desc := bson.D{}
	for _, e := range r.cmd[1:] {
		if !genericFields[e.Key] {
			desc = append(desc, e)
		}
	}
	r.st.appendEvent(&event{op: "modify", db: c.db, coll: c.name, uuid: c.uuid, opDesc: desc})
	return okReply(), nil
}

// cmdRenameCollection renames a collection within its database, keeping its
// documents, indexes, options and UUID. Change streams watching the source or
// the target see a rename event, after which a collection stream is
// invalidated.
func cmdRenameCollection(r *request) (bson.D, error) {
	if err := r.checkFields("to", "dropTarget", "stayTemp", "collectionUUID"); err != nil {
		return nil, err
	}
	if r.db != "admin" {
		return nil, newErr(13, "renameCollection may only be run against the admin database.")
	}
	from, _ := r.cmd[0].Value.(string)
	tv, _ := r.arg("to")
	to, ok := tv.(string)
	if !ok {
		return nil, newErr(codeTypeMismatch, "BSON field 'renameCollection.to' is missing but a required field")
	}
	fdb, fcoll, ok1 := strings.Cut(from, ".")
	tdb, tcoll, ok2 := strings.Cut(to, ".")
	if !ok1 || fcoll == "" {
		return nil, newErr(codeInvalidNamespace, "Invalid source namespace: %s", from)
	}
	if !ok2 || tcoll == "" {
		return nil, newErr(codeInvalidNamespace, "Invalid target namespace: %s", to)
	}
	if err := validCollName(tdb, tcoll); err != nil {
		return nil, err
	}
	if from == to {
		return nil, newErr(codeIllegalOperation, "Can't rename a collection to itself")
	}
	c := r.st.getColl(fdb, fcoll)
	if c == nil {
		return nil, newErr(codeNamespaceNotFound, "Source collection %s does not exist", from)
	}
	if fdb != tdb {
		return nil, errUnsupported("renameCollection across databases")
	}
	dropTarget := r.boolArg("dropTarget", false)
	opDesc := bson.D{{Key: "to", Value: bson.D{{Key: "db", Value: tdb}, {Key: "coll", Value: tcoll}}}}
	if old := r.st.getColl(tdb, tcoll); old != nil {
		if !dropTarget {
			return nil, newErr(codeNamespaceExists, "target namespace exists")
		}
		delete(r.st.dbs[tdb].colls, tcoll)
		opDesc = append(opDesc, bson.E{Key: "dropTarget", Value: old.uuid})
	}
	// a new collection value: a transaction holding the old one conflicts at commit
	nc := *c
	nc.name = tcoll
	d := r.st.dbs[fdb]
	delete(d.colls, fcoll)
	d.colls[tcoll] = &nc
	r.st.ver++
	r.st.appendEvent(&event{op: "rename", db: fdb, coll: fcoll, toDB: tdb, toColl: tcoll, uuid: c.uuid, opDesc: opDesc})
	return okReply(), nil
}
