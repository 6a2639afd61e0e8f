package minimongo

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// updateSpec is a parsed update: either a replacement document or a list
// of operator applications.
type updateSpec struct {
	replace    bson.D
	isRepl     bool
	ops        []updOp
	positional bool // some path uses $, $[] or $[identifier]
	pipeline   []*stage
	isPipeline bool
	filters    map[string]matcher // arrayFilters by identifier
}

// filteredIdent returns the identifier of a filtered positional operator
// $[identifier].
func filteredIdent(part string) (string, bool) {
	if len(part) > 3 && strings.HasPrefix(part, "$[") && strings.HasSuffix(part, "]") {
		return part[2 : len(part)-1], true
	}
	return "", false
}

// checkPositional accepts the positional operators $, $[] and
// $[identifier].
func checkPositional(path string) error {
	n := 0
	for _, part := range strings.Split(path, ".") {
		_, filtered := filteredIdent(part)
		switch {
		case part == "$":
			n++
		case part == "$[]", filtered:
		case strings.HasPrefix(part, "$"):
			return newErr(codeFailedToParse, "The dollar ($) prefixed field '%s' in '%s' is not valid for storage.", part, path)
		}
	}
	if n > 1 {
		return errBadValue(fmt.Sprintf("Too many positional (i.e. '$') elements found in path '%s'", path))
	}
	return nil
}

// resolve returns the update with positional operators replaced by array
// indexes for doc: $ by the first element of the array matched by the
// query filter, $[] by every element.
func (u *updateSpec) resolve(doc, filter bson.D, insert bool) (*updateSpec, error) {
	if !u.positional {
		return u, nil
	}
	out := &updateSpec{}
	for _, o := range u.ops {
		paths, err := expandPositional(doc, filter, o.path, insert, u.filters)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			no := o
			no.path = p
			out.ops = append(out.ops, no)
		}
	}
	if err := checkConflicts(out.ops); err != nil {
		return nil, err
	}
	sort.SliceStable(out.ops, func(i, j int) bool { return out.ops[i].path < out.ops[j].path })
	return out, nil
}

func expandPositional(doc, filter bson.D, path string, insert bool, filters map[string]matcher) ([]string, error) {
	parts := strings.Split(path, ".")
	for i, part := range parts {
		if id, ok := filteredIdent(part); ok {
			prefix := strings.Join(parts[:i], ".")
			v, _ := getPath(doc, prefix)
			arr, ok := v.(bson.A)
			if !ok {
				if insert || v == nil {
					return nil, nil
				}
				return nil, errBadValue(fmt.Sprintf("Cannot apply array updates to non-array element %s: %s", parts[i-1], formatValue(v)))
			}
			m := filters[id]
			var out []string
			for j, e := range arr {
				if !m(bson.D{{Key: id, Value: e}}) {
					continue
				}
				sub := append(append(append([]string{}, parts[:i]...), strconv.Itoa(j)), parts[i+1:]...)
				more, err := expandPositional(doc, filter, strings.Join(sub, "."), insert, filters)
				if err != nil {
					return nil, err
				}
				out = append(out, more...)
			}
			return out, nil
		}
		switch part {
		case "$":
			if insert {
				return nil, errBadValue("The positional operator did not find the match needed from the query.")
			}
			prefix := strings.Join(parts[:i], ".")
			idx, ok := positionalIndex(doc, filter, prefix)
			if !ok {
				return nil, errBadValue("The positional operator did not find the match needed from the query.")
			}
			parts[i] = strconv.Itoa(idx)
		case "$[]":
			prefix := strings.Join(parts[:i], ".")
			v, _ := getPath(doc, prefix)
			arr, ok := v.(bson.A)
			if !ok {
				if insert || v == nil {
					return nil, nil
				}
				return nil, errBadValue(fmt.Sprintf("The path '%s' must exist in the document in order to apply array updates.", prefix))
			}
			var out []string
			for j := range arr {
				sub := append(append(append([]string{}, parts[:i]...), strconv.Itoa(j)), parts[i+1:]...)
				more, err := expandPositional(doc, filter, strings.Join(sub, "."), insert, filters)
				if err != nil {
					return nil, err
				}
				out = append(out, more...)
			}
			return out, nil
		}
	}
	return []string{strings.Join(parts, ".")}, nil
}

// positionalIndex finds the first element of the array at prefix that
// satisfies the filter's conditions on that array.
func positionalIndex(doc, filter bson.D, prefix string) (int, bool) {
	v, _ := getPath(doc, prefix)
	arr, ok := v.(bson.A)
	if !ok {
		return 0, false
	}
	var conds bson.D
	var collect func(f bson.D)
	collect = func(f bson.D) {
		for _, e := range f {
			if e.Key == "$and" {
				if a, ok := e.Value.(bson.A); ok {
					for _, x := range a {
						if d, ok := x.(bson.D); ok {
							collect(d)
						}
					}
				}
				continue
			}
			if e.Key == prefix || strings.HasPrefix(e.Key, prefix+".") {
				conds = append(conds, e)
			}
		}
	}
	collect(filter)
	if len(conds) == 0 {
		return 0, false
	}
	m, err := compileFilter(conds)
	if err != nil {
		return 0, false
	}
	for i, e := range arr {
		// the element alone, at the array's place in a copy of the document
		probe, err := setIn(copyDoc(doc), strings.Split(prefix, "."), bson.A{e})
		if err == nil && m(probe.(bson.D)) {
			return i, true
		}
	}
	return 0, false
}

type updOp struct {
	op   string
	path string
	arg  any
	to   string // $rename target
}

var updateOperators = map[string]bool{
	"$set": true, "$unset": true, "$inc": true, "$mul": true, "$min": true, "$max": true,
	"$setOnInsert": true, "$push": true, "$pull": true, "$pullAll": true, "$addToSet": true,
	"$pop": true, "$rename": true, "$currentDate": true,
}

// updateOpts are the options of an update statement that shape how its
// update document is read.
type updateOpts struct {
	arrayFilters bson.A
	vars         exprVars // let variables and NOW, for pipeline updates
}

// parseUpdateWith parses an update with its arrayFilters and variables.
func parseUpdateWith(u any, o updateOpts) (*updateSpec, error) {
	if a, ok := u.(bson.A); ok {
		if len(o.arrayFilters) > 0 {
			return nil, newErr(codeFailedToParse, "arrayFilters may not be specified for pipeline-style updates")
		}
		return parsePipelineUpdate(a, o.vars)
	}
	spec, err := parseUpdate(u)
	if err != nil {
		return nil, err
	}
	if spec.isRepl {
		if len(o.arrayFilters) > 0 {
			return nil, newErr(codeFailedToParse, "Cannot use array filters with a replacement-style update")
		}
		return spec, nil
	}
	return spec, spec.setArrayFilters(o.arrayFilters, u)
}

// setArrayFilters compiles arrayFilters and checks that they and the
// update's $[identifier] operators name each other, as MongoDB requires.
func (u *updateSpec) setArrayFilters(raw bson.A, update any) error {
	for _, x := range raw {
		d, ok := x.(bson.D)
		if !ok {
			return newErr(codeTypeMismatch, "arrayFilters entries must be objects")
		}
		id, err := arrayFilterIdent(d)
		if err != nil {
			return err
		}
		if u.filters == nil {
			u.filters = map[string]matcher{}
		}
		if _, dup := u.filters[id]; dup {
			return newErr(codeFailedToParse, "Found multiple array filters with the same top-level field name %s", id)
		}
		m, err := compileFilter(d)
		if err != nil {
			return err
		}
		u.filters[id] = m
	}
	used := map[string]bool{}
	for _, o := range u.ops {
		for _, part := range strings.Split(o.path, ".") {
			if id, ok := filteredIdent(part); ok {
				if _, has := u.filters[id]; !has {
					return errBadValue(fmt.Sprintf("No array filter found for identifier '%s' in path '%s'", id, o.path))
				}
				used[id] = true
			}
		}
	}
	for id := range u.filters {
		if !used[id] {
			return newErr(codeFailedToParse, "The array filter for identifier '%s' was not used in the update %s", id, formatValue(update))
		}
	}
	return nil
}

var arrayFilterIdentRE = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// arrayFilterIdent returns the one identifier an array filter is about.
func arrayFilterIdent(d bson.D) (string, error) {
	var id string
	var walk func(d bson.D) error
	walk = func(d bson.D) error {
		for _, e := range d {
			if strings.HasPrefix(e.Key, "$") {
				if arr, ok := e.Value.(bson.A); ok && (e.Key == "$and" || e.Key == "$or" || e.Key == "$nor") {
					for _, x := range arr {
						if sub, ok := x.(bson.D); ok {
							if err := walk(sub); err != nil {
								return err
							}
						}
					}
				}
				continue
			}
			name, _, _ := strings.Cut(e.Key, ".")
			switch {
			case id == "":
				id = name
			case id != name:
				return newErr(codeFailedToParse, "Error parsing array filter :: caused by :: Each array filter must use a single top-level field name, found '%s' and '%s'", id, name)
			}
		}
		return nil
	}
	if err := walk(d); err != nil {
		return "", err
	}
	if id == "" {
		return "", newErr(codeFailedToParse, "Cannot use an expression without a top-level field name in arrayFilters")
	}
	if !arrayFilterIdentRE.MatchString(id) {
		return "", errBadValue(fmt.Sprintf("Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '%s'", id))
	}
	return id, nil
}

// pipelineUpdateStages are the stages an update pipeline may hold.
var pipelineUpdateStages = map[string]bool{
	"$addFields": true, "$set": true, "$project": true, "$unset": true, "$replaceRoot": true, "$replaceWith": true,
}

// parsePipelineUpdate parses an update given as an aggregation pipeline.
func parsePipelineUpdate(a bson.A, vars exprVars) (*updateSpec, error) {
	spec := &updateSpec{isPipeline: true}
	for _, raw := range a {
		d, ok := raw.(bson.D)
		if !ok || len(d) != 1 {
			return nil, newErr(40323, "A pipeline stage specification object must contain exactly one field.")
		}
		name := d[0].Key
		if !pipelineUpdateStages[name] && name != "$fill" {
			if _, err := parseStage(raw, func(string) []bson.D { return nil }); err != nil && asCmdError(err).Code == codeUnrecognizedStage {
				return nil, err
			}
			return nil, newErr(codeInvalidOptions, "%s is not allowed to be used within an update", name)
		}
		st, err := parseStageV(raw, nil, vars)
		if err != nil {
			return nil, err
		}
		spec.pipeline = append(spec.pipeline, st)
	}
	return spec, nil
}

func parseUpdate(u any) (*updateSpec, error) {
	switch x := u.(type) {
	case bson.A:
		return parsePipelineUpdate(x, nil)
	case bson.D:
		if len(x) == 0 || !strings.HasPrefix(x[0].Key, "$") {
			for _, e := range x {
				if strings.HasPrefix(e.Key, "$") {
					return nil, newErr(52, "The dollar ($) prefixed field '%s' in '%s' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.", e.Key, e.Key)
				}
			}
			return &updateSpec{replace: x, isRepl: true}, nil
		}
		spec := &updateSpec{}
		for _, e := range x {
			if !strings.HasPrefix(e.Key, "$") {
				return nil, newErr(codeFailedToParse, "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update specified as an array", e.Key)
			}
			if e.Key == "$bit" {
				return nil, errUnsupported("update operator $bit")
			}
			if !updateOperators[e.Key] {
				return nil, newErr(codeFailedToParse, "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update specified as an array", e.Key)
			}
			args, ok := e.Value.(bson.D)
			if !ok {
				return nil, newErr(codeFailedToParse, "Modifiers operate on fields but we found type %s instead. For example: {$mod: {<field>: ...}} not {%s: %s}", typeName(e.Value), e.Key, formatValue(e.Value))
			}
			for _, a := range args {
				if err := checkPositional(a.Key); err != nil {
					return nil, err
				}
				if strings.Contains(a.Key, "$") {
					spec.positional = true
				}
				op := updOp{op: e.Key, path: a.Key, arg: a.Value}
				if e.Key == "$rename" {
					to, ok := a.Value.(string)
					if !ok {
						return nil, errBadValue(fmt.Sprintf("The 'to' field for $rename must be a string: %s: %s", a.Key, formatValue(a.Value)))
					}
					if strings.Contains(a.Key, "$") {
						return nil, errBadValue("The source field for $rename may not be dynamic: " + a.Key)
					}
					if strings.Contains(to, "$") {
						return nil, errBadValue("The destination field for $rename may not be dynamic: " + to)
					}
					if to == a.Key {
						return nil, errBadValue(fmt.Sprintf("The source and target field for $rename must differ: %s: %s", a.Key, formatValue(to)))
					}
					op.to = to
				}
				if err := validateOpArg(op); err != nil {
					return nil, err
				}
				spec.ops = append(spec.ops, op)
			}
		}
		if err := checkConflicts(spec.ops); err != nil {
			return nil, err
		}
		sort.SliceStable(spec.ops, func(i, j int) bool { return spec.ops[i].path < spec.ops[j].path })
		return spec, nil
	}
	return nil, newErr(codeFailedToParse, "Update argument must be either an object or an array")
}

func validateOpArg(op updOp) error {
	switch op.op {
	case "$inc", "$mul":
		if !isNumber(op.arg) {
			verb := "increment"
			if op.op == "$mul" {
				verb = "multiply"
			}
			return newErr(codeTypeMismatch, "Cannot %s with non-numeric argument: {%s: %s}", verb, op.path, formatValue(op.arg))
		}
	case "$pop":
		n, ok := asInt64(op.arg)
		if !ok || (n != 1 && n != -1) {
			return newErr(codeFailedToParse, "$pop expects 1 or -1, found: %s", formatValue(op.arg))
		}
	case "$currentDate":
		switch x := op.arg.(type) {
		case bool:
		case bson.D:
			t, _ := lookupField(x, "$type")
			if len(x) != 1 || (t != "date" && t != "timestamp") {
				return errBadValue("The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}")
			}
		default:
			return errBadValue(fmt.Sprintf("%s is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({$type: 'timestamp/date'}).", typeName(op.arg)))
		}
	case "$pullAll":
		if _, ok := op.arg.(bson.A); !ok {
			return errBadValue(fmt.Sprintf("$pullAll requires an array argument but was given a %s", typeName(op.arg)))
		}
	case "$push", "$addToSet":
		if d, ok := op.arg.(bson.D); ok && len(d) > 0 && strings.HasPrefix(d[0].Key, "$") {
			for _, m := range d {
				switch {
				case m.Key == "$each":
					if _, ok := m.Value.(bson.A); !ok {
						return errBadValue(fmt.Sprintf("The argument to $each in %s must be an array but it was of type: %s", op.op, typeName(m.Value)))
					}
				case op.op == "$push" && (m.Key == "$slice" || m.Key == "$position" || m.Key == "$sort"):
				default:
					return errBadValue(fmt.Sprintf("Unrecognized clause in %s: %s", op.op, m.Key))
				}
			}
			if _, ok := lookupField(d, "$each"); !ok {
				return errBadValue(fmt.Sprintf("Unrecognized clause in %s: %s", op.op, d[0].Key))
			}
		}
	}
	return nil
}

func checkConflicts(ops []updOp) error {
	var paths []string
	for _, o := range ops {
		paths = append(paths, o.path)
		if o.to != "" {
			paths = append(paths, o.to)
		}
	}
	for i := range paths {
		for j := range paths {
			if i == j {
				continue
			}
			a, b := paths[i], paths[j]
			if a == b || strings.HasPrefix(b, a+".") {
				return newErr(codeConflictingUpdateOps, "Updating the path '%s' would create a conflict at '%s'", b, a)
			}
		}
	}
	return nil
}

// apply returns the updated copy of doc. insert is true for upserts.
func (u *updateSpec) apply(doc bson.D, insert bool) (bson.D, error) {
	id, hasID := lookupField(doc, "_id")
	if u.isPipeline {
		out, err := runStages([]bson.D{copyDoc(doc)}, u.pipeline)
		if err != nil {
			return nil, err
		}
		res := out[0]
		nid, ok := lookupField(res, "_id")
		switch {
		case !hasID:
		case !ok:
			// the _id of the document updated is kept
			res = append(bson.D{{Key: "_id", Value: id}}, res...)
		case !valuesEqual(nid, id) || typeRank(nid) != typeRank(id):
			return nil, newErr(codeImmutableField, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: %s", formatValue(nid))
		}
		return res, nil
	}
	if u.isRepl {
		out := bson.D{}
		if hasID {
			out = append(out, bson.E{Key: "_id", Value: id})
		}
		for _, e := range u.replace {
			if e.Key == "_id" {
				if hasID && !valuesEqual(e.Value, id) {
					return nil, newErr(codeImmutableField, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: %s", formatValue(e.Value))
				}
				if !hasID {
					out = append(bson.D{e}, out...)
				}
				continue
			}
			out = append(out, bson.E{Key: e.Key, Value: deepCopy(e.Value)})
		}
		return out, nil
	}
	out := copyDoc(doc)
	var cur any = out
	for _, o := range u.ops {
		var err error
		cur, err = applyOp(cur.(bson.D), o, insert, doc)
		if err != nil {
			return nil, err
		}
	}
	res := cur.(bson.D)
	if hasID {
		if nid, ok := lookupField(res, "_id"); !ok || !valuesEqual(nid, id) || typeRank(nid) != typeRank(id) {
			return nil, newErr(codeImmutableField, "Performing an update on the path '_id' would modify the immutable field '_id'")
		}
	}
	return res, nil
}

func idDesc(doc bson.D) string {
	id, _ := lookupField(doc, "_id")
	return "{_id: " + formatValue(id) + "}"
}

func applyOp(doc bson.D, o updOp, insert bool, orig bson.D) (bson.D, error) {
	parts := strings.Split(o.path, ".")
	old, exists := getPath(doc, o.path)
	set := func(v any) (bson.D, error) {
		r, err := setIn(doc, parts, v)
		if err != nil {
			return nil, err
		}
		return r.(bson.D), nil
	}
	switch o.op {
	case "$set":
		return set(deepCopy(o.arg))
	case "$setOnInsert":
		if insert {
			return set(deepCopy(o.arg))
		}
		return doc, nil
	case "$unset":
		return unsetIn(doc, parts).(bson.D), nil
	case "$inc", "$mul":
		if !exists {
			if o.op == "$mul" {
				return set(zeroLike(o.arg))
			}
			return set(o.arg)
		}
		if !isNumber(old) {
			verb := "$inc"
			if o.op == "$mul" {
				verb = "$mul"
			}
			return nil, newErr(codeTypeMismatch, "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of non-numeric type %s", verb, idDesc(orig), parts[len(parts)-1], typeName(old))
		}
		return set(arith(o.op, old, o.arg))
	case "$min", "$max":
		if !exists {
			return set(deepCopy(o.arg))
		}
		c := compareValues(o.arg, old)
		if (o.op == "$min" && c < 0) || (o.op == "$max" && c > 0) {
			return set(deepCopy(o.arg))
		}
		return doc, nil
	case "$currentDate":
		now := time.Now()
		var v any = bson.NewDateTimeFromTime(now)
		if d, ok := o.arg.(bson.D); ok {
			if t, _ := lookupField(d, "$type"); t == "timestamp" {
				v = bson.Timestamp{T: uint32(now.Unix()), I: 1}
			}
		}
		return set(v)
	case "$rename":
		if !exists {
			return doc, nil
		}
		d := unsetIn(doc, parts).(bson.D)
		r, err := setIn(d, strings.Split(o.to, "."), old)
		if err != nil {
			return nil, err
		}
		return r.(bson.D), nil
	case "$push", "$addToSet", "$pull", "$pullAll", "$pop":
		var arr bson.A
		if exists {
			a, ok := old.(bson.A)
			if !ok {
				switch o.op {
				case "$pull", "$pullAll":
					return nil, errBadValue("Cannot apply " + o.op + " to a non-array value")
				case "$pop":
					return nil, newErr(codeTypeMismatch, "Path '%s' contains an element of non-array type '%s'", o.path, typeName(old))
				case "$addToSet":
					return nil, errBadValue(fmt.Sprintf("Cannot apply $addToSet to non-array field. Field named '%s' has non-array type %s", parts[len(parts)-1], typeName(old)))
				}
				return nil, errBadValue(fmt.Sprintf("The field '%s' must be an array but is of type %s in document %s", o.path, typeName(old), idDesc(orig)))
			}
			arr = append(bson.A{}, a...)
		} else if o.op == "$pull" || o.op == "$pullAll" || o.op == "$pop" {
			return doc, nil
		}
		na, err := arrayOp(o, arr)
		if err != nil {
			return nil, err
		}
		if na == nil {
			na = bson.A{}
		}
		return set(na)
	}
	return nil, newErr(codeFailedToParse, "Unknown modifier: %s", o.op)
}

func arrayOp(o updOp, arr bson.A) (bson.A, error) {
	switch o.op {
	case "$push":
		items := bson.A{deepCopy(o.arg)}
		pos := -1
		var slice *int64
		var sortSpec any
		if d, ok := o.arg.(bson.D); ok && len(d) > 0 && strings.HasPrefix(d[0].Key, "$") {
			each, _ := lookupField(d, "$each")
			items = deepCopy(each).(bson.A)
			if p, ok := lookupField(d, "$position"); ok {
				n, ok := asInt64(p)
				if !ok {
					return nil, errBadValue("The value for $position must be an integer value")
				}
				pos = int(n)
				if pos < 0 {
					pos = len(arr) + pos
					if pos < 0 {
						pos = 0
					}
				}
			}
			if s, ok := lookupField(d, "$slice"); ok {
				n, ok := asInt64(s)
				if !ok {
					return nil, errBadValue("The value for $slice must be an integer value")
				}
				slice = &n
			}
			if s, ok := lookupField(d, "$sort"); ok {
				sortSpec = s
			}
		}
		if pos < 0 || pos > len(arr) {
			arr = append(arr, items...)
		} else {
			arr = append(arr[:pos:pos], append(items, arr[pos:]...)...)
		}
		if sortSpec != nil {
			if err := sortArray(arr, sortSpec); err != nil {
				return nil, err
			}
		}
		if slice != nil {
			n := int(*slice)
			switch {
			case n >= 0 && n < len(arr):
				arr = arr[:n]
			case n < 0 && -n < len(arr):
				arr = arr[len(arr)+n:]
			}
		}
		return arr, nil
	case "$addToSet":
		items := bson.A{o.arg}
		if d, ok := o.arg.(bson.D); ok && len(d) > 0 && d[0].Key == "$each" {
			items = d[0].Value.(bson.A)
		}
		for _, it := range items {
			found := false
			for _, e := range arr {
				if valuesEqual(e, it) {
					found = true
					break
				}
			}
			if !found {
				arr = append(arr, deepCopy(it))
			}
		}
		return arr, nil
	case "$pull":
		var test func(e any) bool
		if d, ok := o.arg.(bson.D); ok {
			if od, ok := isOperatorDoc(d); ok && od[0].Key != "$and" && od[0].Key != "$or" && od[0].Key != "$nor" {
				vp, err := compileOperators(od)
				if err != nil {
					return nil, err
				}
				test = func(e any) bool { return vp([]any{e}, false) }
			} else {
				m, err := compileFilter(d)
				if err != nil {
					return nil, err
				}
				test = func(e any) bool {
					ed, ok := e.(bson.D)
					return ok && m(ed)
				}
			}
		} else if re, ok := o.arg.(bson.Regex); ok {
			vp, err := regexPred(re.Pattern, re.Options)
			if err != nil {
				return nil, err
			}
			test = func(e any) bool { return vp([]any{e}, false) }
		} else {
			test = func(e any) bool { return valuesEqual(e, o.arg) }
		}
		out := bson.A{}
		for _, e := range arr {
			if !test(e) {
				out = append(out, e)
			}
		}
		return out, nil
	case "$pullAll":
		out := bson.A{}
		for _, e := range arr {
			drop := false
			for _, x := range o.arg.(bson.A) {
				if valuesEqual(e, x) {
					drop = true
					break
				}
			}
			if !drop {
				out = append(out, e)
			}
		}
		return out, nil
	case "$pop":
		if len(arr) == 0 {
			return arr, nil
		}
		if n, _ := asInt64(o.arg); n == 1 {
			return arr[:len(arr)-1], nil
		}
		return arr[1:], nil
	}
	return arr, nil
}

func sortArray(arr bson.A, spec any) error {
	if d, ok := spec.(bson.D); ok {
		keys, err := parseSort(d)
		if err != nil {
			return err
		}
		sort.SliceStable(arr, func(i, j int) bool {
			a, _ := arr[i].(bson.D)
			b, _ := arr[j].(bson.D)
			return compareBySort(a, b, keys) < 0
		})
		return nil
	}
	dir, ok := asInt64(spec)
	if !ok || (dir != 1 && dir != -1) {
		return errBadValue("The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields")
	}
	sort.SliceStable(arr, func(i, j int) bool {
		c := compareValues(arr[i], arr[j])
		if dir < 0 {
			return c > 0
		}
		return c < 0
	})
	return nil
}

func zeroLike(v any) any {
	switch v.(type) {
	case int32:
		return int32(0)
	case int64:
		return int64(0)
	case bson.Decimal128:
		d, _ := bson.ParseDecimal128("0")
		return d
	}
	return 0.0
}

// arith applies $inc or $mul with MongoDB's numeric type promotion.
func arith(op string, a, b any) any {
	_, ad := a.(bson.Decimal128)
	_, bd := b.(bson.Decimal128)
	if ad || bd {
		x, y := toNum(a), toNum(b)
		if x.rat == nil || y.rat == nil {
			d, _ := bson.ParseDecimal128("NaN")
			return d
		}
		r := new(big.Rat)
		if op == "$inc" {
			r.Add(x.rat, y.rat)
		} else {
			r.Mul(x.rat, y.rat)
		}
		d, err := bson.ParseDecimal128(r.FloatString(20))
		if err != nil {
			d, _ = bson.ParseDecimal128("NaN")
		}
		return trimDecimal(d)
	}
	_, af := a.(float64)
	_, bf := b.(float64)
	if af || bf {
		if op == "$inc" {
			return toFloat(a) + toFloat(b)
		}
		return toFloat(a) * toFloat(b)
	}
	x, _ := asInt64(a)
	y, _ := asInt64(b)
	var r int64
	var overflow bool
	if op == "$inc" {
		r = x + y
		overflow = (y > 0 && r < x) || (y < 0 && r > x)
	} else {
		r = x * y
		overflow = x != 0 && (r/x != y || (x == -1 && y == math.MinInt64))
	}
	if overflow {
		if op == "$inc" {
			return float64(x) + float64(y)
		}
		return float64(x) * float64(y)
	}
	_, a32 := a.(int32)
	_, b32 := b.(int32)
	if a32 && b32 && r >= math.MinInt32 && r <= math.MaxInt32 {
		return int32(r)
	}
	return r
}

func trimDecimal(d bson.Decimal128) bson.Decimal128 {
	s := d.String()
	if strings.Contains(s, ".") && !strings.ContainsAny(s, "E") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		if nd, err := bson.ParseDecimal128(s); err == nil {
			return nd
		}
	}
	return d
}

// setIn sets the value at parts inside container, creating documents as
// needed, and returns the updated container.
func setIn(container any, parts []string, val any) (any, error) {
	switch c := container.(type) {
	case bson.D:
		for i := range c {
			if c[i].Key == parts[0] {
				if len(parts) == 1 {
					c[i].Value = val
					return c, nil
				}
				child, err := setIn(c[i].Value, parts[1:], val)
				if err != nil {
					return nil, err
				}
				c[i].Value = child
				return c, nil
			}
		}
		if len(parts) == 1 {
			return append(c, bson.E{Key: parts[0], Value: val}), nil
		}
		child, err := setIn(bson.D{}, parts[1:], val)
		if err != nil {
			return nil, err
		}
		return append(c, bson.E{Key: parts[0], Value: child}), nil
	case bson.A:
		i, err := strconv.Atoi(parts[0])
		if err != nil || i < 0 {
			return nil, newErr(codePathNotViable, "Cannot create field '%s' in element {%s: %s}", parts[0], "array", formatValue(c))
		}
		for len(c) <= i {
			c = append(c, nil)
		}
		if len(parts) == 1 {
			c[i] = val
			return c, nil
		}
		child := c[i]
		if child == nil {
			child = bson.D{}
		}
		nc, err := setIn(child, parts[1:], val)
		if err != nil {
			return nil, err
		}
		c[i] = nc
		return c, nil
	}
	return nil, newErr(codePathNotViable, "Cannot create field '%s' in element %s", parts[0], formatValue(container))
}

func unsetIn(container any, parts []string) any {
	switch c := container.(type) {
	case bson.D:
		for i := range c {
			if c[i].Key == parts[0] {
				if len(parts) == 1 {
					return append(c[:i:i], c[i+1:]...)
				}
				c[i].Value = unsetIn(c[i].Value, parts[1:])
				return c
			}
		}
	case bson.A:
		i, err := strconv.Atoi(parts[0])
		if err != nil || i < 0 || i >= len(c) {
			return c
		}
		if len(parts) == 1 {
			c[i] = nil
			return c
		}
		c[i] = unsetIn(c[i], parts[1:])
	}
	return container
}

// upsertSeed builds the base document of an upsert from the equality
// conditions of its filter.
func upsertSeed(filter bson.D) (bson.D, error) {
	out := bson.D{}
	var walk func(f bson.D) error
	walk = func(f bson.D) error {
		for _, e := range f {
			if e.Key == "$and" {
				if arr, ok := e.Value.(bson.A); ok {
					for _, x := range arr {
						if d, ok := x.(bson.D); ok {
							if err := walk(d); err != nil {
								return err
							}
						}
					}
				}
				continue
			}
			if strings.HasPrefix(e.Key, "$") {
				continue
			}
			v := e.Value
			if d, ok := isOperatorDoc(v); ok {
				eq, ok := lookupField(d, "$eq")
				if !ok {
					continue
				}
				v = eq
			}
			if _, ok := v.(bson.Regex); ok {
				continue
			}
			r, err := setIn(out, strings.Split(e.Key, "."), deepCopy(v))
			if err != nil {
				return err
			}
			out = r.(bson.D)
		}
		return nil
	}
	if err := walk(filter); err != nil {
		return nil, err
	}
	return out, nil
}

func sameBytes(a, b bson.D) bool { return identical(a, b) }
