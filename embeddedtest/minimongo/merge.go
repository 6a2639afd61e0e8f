package minimongo

import (
	"crypto/sha256"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Aggregation stages that read from somewhere else than a collection
// ($documents, $listLocalSessions) and that write the results into a collection
// ($out, $merge), as MongoDB 7.0 runs them on a replica set primary.

// outTarget is where $out or $merge writes.
type outTarget struct {
	stage          string // "$out" or "$merge"
	db, coll       string
	on             []string
	whenMatched    any // "replace", "keepExisting", "merge", "fail" or a pipeline (bson.A)
	whenNotMatched string
	vars           bson.D // $merge's let
}

// splitOutput removes a final $out or $merge from a pipeline and parses it. A
// $out or $merge anywhere else fails as in MongoDB.
func (r *request) splitOutput(p bson.A) (bson.A, *outTarget, error) {
	for i, raw := range p {
		d, _ := raw.(bson.D)
		if len(d) != 1 || (d[0].Key != "$out" && d[0].Key != "$merge") {
			continue
		}
		if i != len(p)-1 {
			return nil, nil, newErr(40601, "%s can only be the final stage in the pipeline", d[0].Key)
		}
		if r.tx != nil {
			return nil, nil, newErr(codeOperationNotSupportedInTx, "%s cannot be used in a transaction", d[0].Key)
		}
		if rc, ok := r.arg("readConcern"); ok {
			if lv, _ := lookupField(rc.(bson.D), "level"); lv == "linearizable" {
				return nil, nil, newErr(codeInvalidOptions, "%s cannot be used with a 'linearizable' read concern level", d[0].Key)
			}
		}
		t := &outTarget{stage: d[0].Key, db: r.db, on: []string{"_id"}, whenMatched: "merge", whenNotMatched: "insert"}
		var err error
		if d[0].Key == "$out" {
			err = t.parseOut(d[0].Value)
		} else {
			err = t.parseMerge(d[0].Value)
		}
		if err != nil {
			return nil, nil, err
		}
		return p[:i], t, nil
	}
	return p, nil, nil
}

func (t *outTarget) parseOut(v any) error {
	switch x := v.(type) {
	case string:
		t.coll = x
	case bson.D:
		for _, e := range x {
			s, ok := e.Value.(string)
			switch {
			case e.Key == "db" && ok:
				t.db = s
			case e.Key == "coll" && ok:
				t.coll = s
			case e.Key == "timeseries":
				return errUnsupported("$out option timeseries")
			default:
				return newErr(codeUnknownField, "BSON field '$out.%s' is an unknown field.", e.Key)
			}
		}
	default:
		return newErr(16990, "$out only supports a string or object argument, not %s", typeName(v))
	}
	if t.coll == "" {
		return newErr(codeFailedToParse, "BSON field '$out.coll' is missing but a required field")
	}
	return nil
}

func (t *outTarget) parseMerge(v any) error {
	var into any
	switch x := v.(type) {
	case string:
		into = x
	case bson.D:
		for _, e := range x {
			switch e.Key {
			case "into":
				into = e.Value
			case "on":
				t.on = nil
				switch o := e.Value.(type) {
				case string:
					t.on = []string{o}
				case bson.A:
					for _, f := range o {
						s, ok := f.(string)
						if !ok {
							return newErr(51134, "$merge 'on' array elements must be strings, but found %s", typeName(f))
						}
						t.on = append(t.on, s)
					}
				default:
					return newErr(51186, "$merge 'on' field must be either a string or an array of strings, but found %s", typeName(e.Value))
				}
			case "whenMatched":
				switch w := e.Value.(type) {
				case string:
					switch w {
					case "replace", "keepExisting", "merge", "fail":
					default:
						return errBadValue("Enumeration value '" + w + "' for field 'whenMatched' is not a valid value.")
					}
				case bson.A:
				default:
					return newErr(codeTypeMismatch, "BSON field '$merge.whenMatched' is the wrong type '%s'", typeName(e.Value))
				}
				t.whenMatched = e.Value
			case "whenNotMatched":
				w, _ := e.Value.(string)
				switch w {
				case "insert", "discard", "fail":
				default:
					return errBadValue("Enumeration value '" + formatValue(e.Value) + "' for field 'whenNotMatched' is not a valid value.")
				}
				t.whenNotMatched = w
			case "let":
				d, ok := e.Value.(bson.D)
				if !ok {
					return newErr(codeTypeMismatch, "BSON field '$merge.let' is the wrong type '%s', expected type 'object'", typeName(e.Value))
				}
				t.vars = d
			default:
				return newErr(codeUnknownField, "BSON field '$merge.%s' is an unknown field.", e.Key)
			}
		}
	default:
		return newErr(51182, "$merge only supports a string or object argument, not %s", typeName(v))
	}
	switch x := into.(type) {
	case string:
		t.coll = x
	case bson.D:
		for _, e := range x {
			s, _ := e.Value.(string)
			switch e.Key {
			case "db":
				t.db = s
			case "coll":
				t.coll = s
			default:
				return newErr(codeUnknownField, "BSON field '$merge.into.%s' is an unknown field.", e.Key)
			}
		}
	}
	if t.coll == "" {
		return newErr(codeFailedToParse, "BSON field '$merge.into' is missing but a required field")
	}
	if _, isPipe := t.whenMatched.(bson.A); t.vars != nil && !isPipe {
		return newErr(51199, "Cannot use 'let' variables with 'whenMatched: %s' mode", formatValue(t.whenMatched))
	}
	return nil
}

// writeOutput writes an aggregation's results as $out or $merge says.
func (r *request) writeOutput(t *outTarget, docs []bson.D) error {
	c, _, err := r.st.ensureColl(t.db, t.coll)
	if err != nil {
		return err
	}
	if t.stage == "$out" {
		return r.writeOut(c, docs)
	}
	return r.writeMerge(c, t, docs)
}

// writeOut replaces the target's documents by docs. MongoDB writes a temporary
// collection and renames it over the target; here the target's documents are
// deleted and the results inserted (change streams on the target see those
// deletes and inserts, not a rename). A duplicate _id among the results fails
// before anything is written, as MongoDB's temporary collection would.
func (r *request) writeOut(c *collection, docs []bson.D) error {
	seen := map[string]bool{}
	prepared := make([]bson.D, len(docs))
	for i, d := range docs {
		pd, id, err := prepareInsert(d)
		if err != nil {
			return err
		}
		k := idKey(id)
		if seen[k] {
			return dupKeyError(c, c.indexes[0], bson.D{{Key: "_id", Value: id}})
		}
		seen[k] = true
		prepared[i] = pd
	}
	for _, kd := range r.view().all(c) {
		if err := r.write(c, kd.key, nil, &event{op: "delete", docKey: docKeyOf(kd.doc), preImage: kd.doc}); err != nil {
			return err
		}
	}
	for _, d := range prepared {
		if _, err := r.insertDoc(c, d); err != nil {
			return err
		}
	}
	return nil
}

func (r *request) writeMerge(c *collection, t *outTarget, docs []bson.D) error {
	onID := len(t.on) == 1 && t.on[0] == "_id"
	if !onID && !hasUniqueIndexOn(c, t.on) {
		return newErr(51183, "Cannot find index to verify that join fields will be unique")
	}
	var pipe []*stage
	if p, ok := t.whenMatched.(bson.A); ok {
		var err error
		if pipe, err = parsePipelineUpdateStages(p); err != nil {
			return err
		}
	}
	for _, d := range docs {
		filter := bson.D{}
		for _, f := range t.on {
			v, ok := getPath(d, f)
			if !ok || v == nil {
				return newErr(51132, "$merge write error: 'on' field '%s' cannot be missing, null, undefined or an array", f)
			}
			filter = append(filter, bson.E{Key: f, Value: v})
		}
		m, err := compileFilter(filter)
		if err != nil {
			return err
		}
		var target *keyedDoc
		for _, kd := range r.view().candidates(c, filter) {
			if m(kd.doc) {
				kd := kd
				target = &kd
				break
			}
		}
		if target == nil {
			switch t.whenNotMatched {
			case "discard":
				continue
			case "fail":
				return newErr(13113, "$merge could not find a matching document in the target collection for at least one document in the source collection")
			}
			if _, err := r.insertDoc(c, d); err != nil {
				return err
			}
			continue
		}
		var nd bson.D
		switch w := t.whenMatched.(type) {
		case string:
			switch w {
			case "keepExisting":
				continue
			case "fail":
				_, err := r.insertDoc(c, d) // fails with the duplicate key error MongoDB reports
				if err == nil {
					err = newErr(codeDuplicateKey, "$merge with whenMatched: fail found a matching document")
				}
				return err
			case "replace":
				nd = copyDoc(d)
				if _, ok := lookupField(nd, "_id"); !ok {
					id, _ := lookupField(target.doc, "_id")
					nd = append(bson.D{{Key: "_id", Value: id}}, nd...)
				}
			default: // merge
				nd = copyDoc(target.doc)
				for _, e := range d {
					nd = setTop(nd, e.Key, e.Value)
				}
			}
		default:
			vars := exprVars{"new": d}
			for _, e := range t.vars {
				v, _, err := evalExprV(e.Value, d, vars)
				if err != nil {
					return err
				}
				vars[e.Key] = v
			}
			cur := []bson.D{copyDoc(target.doc)}
			for _, st := range pipe {
				sv, err := parseStageV(bson.D{{Key: st.name, Value: st.arg}}, nil, vars)
				if err != nil {
					return err
				}
				if cur, err = sv.run(cur); err != nil {
					return err
				}
			}
			if len(cur) != 1 {
				return newErr(51196, "$merge pipeline must produce exactly one document")
			}
			nd = cur[0]
		}
		tid, _ := lookupField(target.doc, "_id")
		if id, ok := lookupField(nd, "_id"); ok && keyString(id) != keyString(tid) {
			return newErr(codeImmutableField, "$merge failed to update the matching document, did you attempt to modify the _id or the shard key? :: caused by :: Performing an update on the path '_id' would modify the immutable field '_id'")
		}
		if sameBytes(target.doc, nd) {
			continue
		}
		if err := r.st.checkUnique(r.view(), c, target.key, nd); err != nil {
			return err
		}
		ev := &event{op: "replace", docKey: docKeyOf(target.doc), fullDoc: nd, preImage: target.doc}
		if err := r.write(c, target.key, nd, ev); err != nil {
			return err
		}
	}
	return nil
}

// setTop sets a top-level field, keeping its position when it exists.
func setTop(d bson.D, k string, v any) bson.D {
	for i := range d {
		if d[i].Key == k {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: k, Value: v})
}

func hasUniqueIndexOn(c *collection, fields []string) bool {
	for _, ix := range c.indexes {
		if !ix.unique || ix.partial != nil || len(ix.keys) != len(fields) {
			continue
		}
		all := true
		for _, f := range fields {
			if _, ok := lookupField(ix.keys, f); !ok {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// parsePipelineUpdateStages validates a $merge whenMatched pipeline: the stages
// an update pipeline may hold.
func parsePipelineUpdateStages(p bson.A) ([]*stage, error) {
	var out []*stage
	for _, raw := range p {
		d, ok := raw.(bson.D)
		if !ok || len(d) != 1 {
			return nil, newErr(40323, "A pipeline stage specification object must contain exactly one field.")
		}
		if !pipelineUpdateStages[d[0].Key] {
			return nil, newErr(72, "%s is not allowed to be used within an update", d[0].Key)
		}
		out = append(out, &stage{name: d[0].Key, arg: d[0].Value})
	}
	return out, nil
}

// sourceStage runs a database-level aggregation's first stage, $documents or
// $listLocalSessions, and returns its documents and the rest of the pipeline.
func (r *request) sourceStage(p bson.A, vars exprVars) ([]bson.D, bson.A, bool, error) {
	if len(p) == 0 {
		return nil, p, false, nil
	}
	d, _ := p[0].(bson.D)
	if len(d) != 1 {
		return nil, p, false, nil
	}
	switch d[0].Key {
	case "$documents":
		v, _, err := evalExprV(d[0].Value, bson.D{}, vars)
		if err != nil {
			return nil, nil, false, err
		}
		arr, ok := v.(bson.A)
		if !ok {
			return nil, nil, false, newErr(5858203, "an array is expected")
		}
		out := make([]bson.D, 0, len(arr))
		for _, x := range arr {
			doc, ok := x.(bson.D)
			if !ok {
				return nil, nil, false, newErr(40228, "'replacement document' must evaluate to an object, but resulting value was: %s. Type of resulting value: '%s'.", formatValue(x), typeName(x))
			}
			out = append(out, doc)
		}
		return out, p[1:], true, nil
	case "$listLocalSessions":
		uid := sha256.Sum256(nil)
		var out []bson.D
		for _, sess := range r.st.sessions {
			id, _ := lookupField(sess.lsid, "id")
			out = append(out, bson.D{
				{Key: "_id", Value: bson.D{{Key: "id", Value: id}, {Key: "uid", Value: bson.Binary{Subtype: 0, Data: uid[:]}}}},
				{Key: "lastUse", Value: bson.NewDateTimeFromTime(sess.lastUsed.Truncate(time.Millisecond))},
			})
		}
		return out, p[1:], true, nil
	}
	return nil, p, false, nil
}
