package minimongo

import (
	"math"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ---- sorting ----

type sortKey struct {
	path string
	desc bool
}

func parseSort(d bson.D) ([]sortKey, error) {
	keys := make([]sortKey, 0, len(d))
	for _, e := range d {
		if _, ok := e.Value.(bson.D); ok {
			return nil, errUnsupported("$meta sort on field " + e.Key)
		}
		n, ok := asInt64(e.Value)
		if !ok || (n != 1 && n != -1) {
			return nil, newErr(15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)")
		}
		keys = append(keys, sortKey{path: e.Key, desc: n < 0})
	}
	return keys, nil
}

// emptyArray sorts an empty array before null, as MongoDB does.
type emptyArray struct{}

// sortValue returns the value a document sorts by: the smallest (ascending)
// or largest (descending) element for array values.
func sortValue(doc bson.D, path string, desc bool) any {
	var best any
	first := true
	consider := func(v any) {
		if first {
			best, first = v, false
			return
		}
		c := compareValues(v, best)
		if (desc && c > 0) || (!desc && c < 0) {
			best = v
		}
	}
	for _, v := range traverse(doc, path) {
		if a, ok := v.(bson.A); ok {
			if len(a) == 0 {
				consider(emptyArray{})
			}
			for _, e := range a {
				consider(e)
			}
			continue
		}
		consider(v)
	}
	if first {
		return nil
	}
	return best
}

func compareBySort(a, b bson.D, keys []sortKey) int {
	for _, k := range keys {
		c := compareValues(sortValue(a, k.path, k.desc), sortValue(b, k.path, k.desc))
		if k.desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func sortDocs(docs []bson.D, keys []sortKey) {
	sort.SliceStable(docs, func(i, j int) bool { return compareBySort(docs[i], docs[j], keys) < 0 })
}

// ---- expressions ----

// exprVars holds the variables an expression may refer to besides ROOT,
// CURRENT and REMOVE: NOW and those a command's let defines.
type exprVars map[string]any

// evalExpr evaluates an aggregation expression against doc. The boolean
// result is false when the expression evaluates to a missing value.
func evalExpr(expr any, doc bson.D) (any, bool, error) { return evalExprV(expr, doc, nil) }

// evalExprV evaluates an expression with variables.
func evalExprV(expr any, doc bson.D, vars exprVars) (any, bool, error) {
	switch x := expr.(type) {
	case string:
		if strings.HasPrefix(x, "$$") {
			name := x[2:]
			rest := ""
			if i := strings.IndexByte(name, '.'); i >= 0 {
				name, rest = name[:i], name[i+1:]
			}
			switch name {
			case "ROOT", "CURRENT":
				if rest == "" {
					return doc, true, nil
				}
				return evalPath(doc, strings.Split(rest, "."))
			case "REMOVE":
				return nil, false, nil
			}
			if v, ok := vars[name]; ok {
				if rest == "" {
					return v, true, nil
				}
				return evalPath(v, strings.Split(rest, "."))
			}
			return nil, false, newErr(17276, "Use of undefined variable: %s", name)
		}
		if strings.HasPrefix(x, "$") {
			if len(x) == 1 {
				return nil, false, newErr(16872, "'$' by itself is not a valid FieldPath")
			}
			return evalPath(doc, strings.Split(x[1:], "."))
		}
		return x, true, nil
	case bson.D:
		if len(x) > 0 && strings.HasPrefix(x[0].Key, "$") {
			if len(x) != 1 {
				return nil, false, newErr(15983, "An object representing an expression must have exactly one field: %s", formatValue(x))
			}
			if x[0].Key == "$literal" {
				return x[0].Value, true, nil
			}
			return evalOperator(x[0].Key, x[0].Value, doc, vars)
		}
		out := bson.D{}
		for _, e := range x {
			v, ok, err := evalExprV(e.Value, doc, vars)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, bson.E{Key: e.Key, Value: v})
			}
		}
		return out, true, nil
	case bson.A:
		out := bson.A{}
		for _, e := range x {
			v, ok, err := evalExprV(e, doc, vars)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				v = nil
			}
			out = append(out, v)
		}
		return out, true, nil
	}
	return expr, true, nil
}

func evalPath(v any, parts []string) (any, bool, error) {
	if len(parts) == 0 {
		return v, true, nil
	}
	switch x := v.(type) {
	case bson.D:
		f, ok := lookupField(x, parts[0])
		if !ok {
			return nil, false, nil
		}
		return evalPath(f, parts[1:])
	case bson.A:
		out := bson.A{}
		for _, e := range x {
			if _, isDoc := e.(bson.D); !isDoc {
				if _, isArr := e.(bson.A); !isArr {
					continue
				}
			}
			r, ok, err := evalPath(e, parts)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, r)
			}
		}
		return out, true, nil
	}
	return nil, false, nil
}

// ---- projection ----

type projNode struct {
	leaf     bool // include/exclude this whole field
	expr     any
	hasExpr  bool
	children map[string]*projNode
	order    []string
}

type projection struct {
	root      *projNode
	inclusion bool
	idOff     bool
	vars      exprVars
}

func (n *projNode) child(k string) *projNode {
	if n.children == nil {
		n.children = map[string]*projNode{}
	}
	c, ok := n.children[k]
	if !ok {
		c = &projNode{}
		n.children[k] = c
		n.order = append(n.order, k)
	}
	return c
}

// parseProjection parses a find projection or $project specification.
func parseProjection(spec bson.D) (*projection, error) {
	p := &projection{root: &projNode{}}
	mode := 0 // 1 inclusion, -1 exclusion
	var walk func(prefix string, d bson.D) error
	walk = func(prefix string, d bson.D) error {
		for _, e := range d {
			path := e.Key
			if prefix != "" {
				path = prefix + "." + e.Key
			}
			if strings.HasPrefix(e.Key, "$") {
				return newErr(16410, "FieldPath field names may not start with '$'. Consider using $getField or $setField.")
			}
			var m int
			node := p.root
			for _, part := range strings.Split(path, ".") {
				node = node.child(part)
			}
			switch v := e.Value.(type) {
			case bool, int32, int64, float64, bson.Decimal128:
				if truthy(v) {
					m = 1
				} else {
					m = -1
				}
				node.leaf = true
			case bson.D:
				if len(v) > 0 && strings.HasPrefix(v[0].Key, "$") {
					switch v[0].Key {
					case "$slice", "$elemMatch", "$meta":
						return errUnsupported("projection operator " + v[0].Key)
					}
					m = 1
					node.hasExpr, node.expr = true, v
				} else {
					if len(v) == 0 {
						return newErr(51270, "An empty sub-projection is not a valid value. Found empty object at path")
					}
					if err := walk(path, v); err != nil {
						return err
					}
					continue
				}
			default:
				m = 1
				node.hasExpr, node.expr = true, v
			}
			if path == "_id" {
				if m == -1 {
					p.idOff = true
				}
				if !node.hasExpr {
					continue
				}
			}
			if mode == 0 {
				mode = m
			} else if mode != m {
				if m == -1 {
					return newErr(31254, "Cannot do exclusion on field %s in inclusion projection", path)
				}
				return newErr(31253, "Cannot do inclusion on field %s in exclusion projection", path)
			}
		}
		return nil
	}
	if err := walk("", spec); err != nil {
		return nil, err
	}
	p.inclusion = mode > 0 || (mode == 0 && !p.idOff)
	if _, ok := p.root.children["_id"]; !ok && p.inclusion && !p.idOff {
		p.root.child("_id").leaf = true
	}
	return p, nil
}

func (p *projection) apply(doc bson.D) (bson.D, error) {
	if p.inclusion {
		return includeDoc(doc, doc, p.root, p.idOff, true, p.vars)
	}
	out := excludeDoc(doc, p.root)
	return out, nil
}

func includeDoc(root, doc bson.D, n *projNode, idOff, top bool, vars exprVars) (bson.D, error) {
	out := bson.D{}
	for _, e := range doc {
		c := n.children[e.Key]
		if c == nil || c.hasExpr {
			continue
		}
		if top && e.Key == "_id" && idOff {
			continue
		}
		if c.leaf {
			out = append(out, e)
			continue
		}
		switch v := e.Value.(type) {
		case bson.D:
			sub, err := includeDoc(root, v, c, false, false, vars)
			if err != nil {
				return nil, err
			}
			out = append(out, bson.E{Key: e.Key, Value: sub})
		case bson.A:
			arr := bson.A{}
			for _, x := range v {
				if d, ok := x.(bson.D); ok {
					sub, err := includeDoc(root, d, c, false, false, vars)
					if err != nil {
						return nil, err
					}
					arr = append(arr, sub)
				}
			}
			out = append(out, bson.E{Key: e.Key, Value: arr})
		}
	}
	for _, k := range n.order {
		c := n.children[k]
		if !c.hasExpr {
			continue
		}
		v, ok, err := evalExprV(c.expr, root, vars)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, bson.E{Key: k, Value: v})
		}
	}
	return out, nil
}

func excludeDoc(doc bson.D, n *projNode) bson.D {
	out := bson.D{}
	for _, e := range doc {
		c := n.children[e.Key]
		if c == nil {
			out = append(out, e)
			continue
		}
		if c.leaf {
			continue
		}
		switch v := e.Value.(type) {
		case bson.D:
			out = append(out, bson.E{Key: e.Key, Value: excludeDoc(v, c)})
		case bson.A:
			arr := bson.A{}
			for _, x := range v {
				if d, ok := x.(bson.D); ok {
					arr = append(arr, excludeDoc(d, c))
				} else {
					arr = append(arr, x)
				}
			}
			out = append(out, bson.E{Key: e.Key, Value: arr})
		default:
			out = append(out, e)
		}
	}
	return out
}

// ---- pipeline ----

type stage struct {
	name string
	arg  any
	run  func(in []bson.D) ([]bson.D, error)
}

// unsupportedStages are MongoDB 7/8's aggregation stages this server does not
// implement; any other unknown name is not a stage at all (40324).
var unsupportedStages = map[string]bool{
	"$facet": true, "$bucket": true, "$bucketAuto": true,
	"$sample": true, "$graphLookup": true, "$densify": true, "$fill": true,
	"$geoNear": true, "$indexStats": true, "$collStats": true, "$redact": true, "$setWindowFields": true,
	"$unionWith": true, "$currentOp": true, "$listSessions": true, "$search": true,
	"$searchMeta": true, "$vectorSearch": true, "$listSearchIndexes": true,
	"$listSampledQueries": true, "$listCatalog": true, "$listClusterCatalog": true, "$planCacheStats": true,
	"$shardedDataDistribution": true, "$changeStreamSplitLargeEvent": true, "$querySettings": true,
	"$queryStats": true, "$rankFusion": true, "$scoreFusion": true, "$score": true,
}

// parseStage validates one pipeline stage and returns its implementation.
// lookup resolves the collections of $lookup; nil where $lookup is not
// allowed (change streams).
func parseStage(raw any, lookup collLookup) (*stage, error) { return parseStageV(raw, lookup, nil) }

// parseStageV is parseStage for stages whose expressions may use variables.
func parseStageV(raw any, lookup collLookup, vars exprVars) (*stage, error) {
	d, ok := raw.(bson.D)
	if !ok || len(d) != 1 {
		return nil, newErr(40323, "A pipeline stage specification object must contain exactly one field.")
	}
	name, arg := d[0].Key, d[0].Value
	st := &stage{name: name, arg: arg}
	switch name {
	case "$listSearchIndexes":
		return nil, errSearchNotEnabled()
	case "$out", "$merge":
		return nil, newErr(40601, "%s can only be the final stage in the pipeline", name)
	case "$documents", "$listLocalSessions":
		return nil, newErr(40602, "%s is only valid as the first stage in a pipeline", name)
	case "$match":
		f, ok := arg.(bson.D)
		if !ok {
			return nil, newErr(15959, "the match filter must be an expression in an object")
		}
		m, err := compileFilterV(f, vars)
		if err != nil {
			return nil, err
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			out := in[:0:0]
			for _, doc := range in {
				if m(doc) {
					out = append(out, doc)
				}
			}
			return out, nil
		}
	case "$sort":
		sd, ok := arg.(bson.D)
		if !ok || len(sd) == 0 {
			return nil, newErr(15976, "$sort stage must have at least one sort key")
		}
		keys, err := parseSort(sd)
		if err != nil {
			return nil, err
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			out := append([]bson.D(nil), in...)
			sortDocs(out, keys)
			return out, nil
		}
	case "$skip":
		n, ok := asInt64(arg)
		if !ok || n < 0 {
			return nil, newErr(15956, "invalid argument to $skip stage: Expected a non-negative number in: $skip: %s", formatValue(arg))
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			if int64(len(in)) <= n {
				return nil, nil
			}
			return in[n:], nil
		}
	case "$limit":
		n, ok := asInt64(arg)
		if !ok || n <= 0 {
			return nil, newErr(15958, "invalid argument to $limit stage: Expected a positive number in: $limit: %s", formatValue(arg))
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			if int64(len(in)) > n {
				return in[:n], nil
			}
			return in, nil
		}
	case "$project":
		pd, ok := arg.(bson.D)
		if !ok || len(pd) == 0 {
			return nil, newErr(51272, "$project specification must be an object")
		}
		p, err := parseProjection(pd)
		if err != nil {
			return nil, err
		}
		p.vars = vars
		st.run = mapDocs(p.apply)
	case "$unset":
		var fields bson.D
		switch x := arg.(type) {
		case string:
			fields = bson.D{{Key: x, Value: int32(0)}}
		case bson.A:
			for _, f := range x {
				s, ok := f.(string)
				if !ok {
					return nil, newErr(31120, "$unset specification must be a string or an array containing only string values")
				}
				fields = append(fields, bson.E{Key: s, Value: int32(0)})
			}
		default:
			return nil, newErr(31002, "$unset specification must be a string or an array")
		}
		p, err := parseProjection(fields)
		if err != nil {
			return nil, err
		}
		st.run = mapDocs(p.apply)
	case "$addFields", "$set":
		ad, ok := arg.(bson.D)
		if !ok {
			return nil, newErr(40272, "%s specification stage must be an object", name)
		}
		st.run = mapDocs(func(doc bson.D) (bson.D, error) {
			out := copyDoc(doc)
			for _, e := range ad {
				v, ok, err := evalExprV(e.Value, doc, vars)
				if err != nil {
					return nil, err
				}
				if !ok {
					out = unsetIn(out, strings.Split(e.Key, ".")).(bson.D)
					continue
				}
				r, err := setIn(out, strings.Split(e.Key, "."), v)
				if err != nil {
					return nil, err
				}
				out = r.(bson.D)
			}
			return out, nil
		})
	case "$replaceRoot", "$replaceWith":
		expr := arg
		if name == "$replaceRoot" {
			rd, ok := arg.(bson.D)
			nr, has := lookupField(rd, "newRoot")
			if !ok || !has || len(rd) != 1 {
				return nil, newErr(40231, "no newRoot specified for the $replaceRoot stage")
			}
			expr = nr
		}
		st.run = mapDocs(func(doc bson.D) (bson.D, error) {
			v, _, err := evalExprV(expr, doc, vars)
			if err != nil {
				return nil, err
			}
			d, ok := v.(bson.D)
			if !ok {
				return nil, newErr(40228, "'newRoot' expression must evaluate to an object, but resulting value was: %s. Type of resulting value: '%s'.", formatValue(v), typeName(v))
			}
			return d, nil
		})
	case "$count":
		field, ok := arg.(string)
		if !ok || field == "" || strings.HasPrefix(field, "$") || strings.Contains(field, ".") {
			return nil, newErr(40156, "the count field must be a non-empty string")
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			if len(in) == 0 {
				return nil, nil
			}
			return []bson.D{{{Key: field, Value: int32(len(in))}}}, nil
		}
	case "$group":
		g, err := parseGroup(arg)
		if err != nil {
			return nil, err
		}
		st.run = g.run
	case "$unwind":
		u, err := parseUnwind(arg)
		if err != nil {
			return nil, err
		}
		st.run = u
	case "$sortByCount":
		if s, ok := arg.(string); !ok || !strings.HasPrefix(s, "$") {
			if _, isDoc := arg.(bson.D); !isDoc {
				return nil, newErr(40148, "the sortByCount field must be defined as a $-prefixed path or an expression")
			}
		}
		g, err := parseGroup(bson.D{{Key: "_id", Value: arg}, {Key: "count", Value: bson.D{{Key: "$sum", Value: int32(1)}}}})
		if err != nil {
			return nil, err
		}
		st.run = func(in []bson.D) ([]bson.D, error) {
			out, err := g.run(in)
			if err != nil {
				return nil, err
			}
			sortDocs(out, []sortKey{{path: "count", desc: true}})
			return out, nil
		}
	case "$lookup":
		if lookup == nil {
			return nil, newErr(codeIllegalOperation, "$lookup is not permitted here")
		}
		run, err := parseLookup(arg, lookup)
		if err != nil {
			return nil, err
		}
		st.run = run
	case "$changeStream":
		return nil, newErr(40602, "$changeStream is only valid as the first stage in a pipeline.")
	default:
		if unsupportedStages[name] {
			return nil, errUnsupported("pipeline stage " + name)
		}
		return nil, newErr(codeUnrecognizedStage, "Unrecognized pipeline stage name: '%s'", name)
	}
	return st, nil
}

func mapDocs(f func(bson.D) (bson.D, error)) func([]bson.D) ([]bson.D, error) {
	return func(in []bson.D) ([]bson.D, error) {
		out := make([]bson.D, 0, len(in))
		for _, d := range in {
			r, err := f(d)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// collLookup returns the documents of a collection of the database the
// pipeline runs in (nil when it does not exist).
type collLookup func(coll string) []bson.D

func parseLookup(arg any, lookup collLookup) (func([]bson.D) ([]bson.D, error), error) {
	spec, ok := arg.(bson.D)
	if !ok {
		return nil, newErr(codeFailedToParse, "the $lookup specification must be an Object")
	}
	var from, local, foreign, as string
	for _, e := range spec {
		s, isStr := e.Value.(string)
		switch e.Key {
		case "from", "localField", "foreignField", "as":
			if !isStr {
				return nil, newErr(codeFailedToParse, "$lookup argument '%s: %s' must be a string, is type %s", e.Key, formatValue(e.Value), typeName(e.Value))
			}
		case "let", "pipeline":
			return nil, errUnsupported("$lookup with " + e.Key)
		default:
			return nil, newErr(codeFailedToParse, "unknown argument to $lookup: %s", e.Key)
		}
		switch e.Key {
		case "from":
			from = s
		case "localField":
			local = s
		case "foreignField":
			foreign = s
		case "as":
			as = s
		}
	}
	if from == "" || local == "" || foreign == "" || as == "" {
		return nil, newErr(codeFailedToParse, "$lookup requires 'from', 'localField', 'foreignField' and 'as' to be specified")
	}
	return func(in []bson.D) ([]bson.D, error) {
		others := lookup(from)
		out := make([]bson.D, 0, len(in))
		for _, doc := range in {
			var keys []any
			for _, v := range traverse(doc, local) {
				if a, ok := v.(bson.A); ok {
					keys = append(keys, a...)
				} else {
					keys = append(keys, v)
				}
			}
			if len(keys) == 0 {
				keys = []any{nil}
			}
			matches := bson.A{}
			for _, o := range others {
				vals, missing := traverseM(o, strings.Split(foreign, "."))
				for _, k := range keys {
					if eqPred(k)(vals, missing || len(vals) == 0) {
						matches = append(matches, o)
						break
					}
				}
			}
			r, err := setIn(copyDoc(doc), strings.Split(as, "."), matches)
			if err != nil {
				return nil, err
			}
			out = append(out, r.(bson.D))
		}
		return out, nil
	}, nil
}

func parsePipeline(p bson.A, lookup collLookup) ([]*stage, error) {
	return parsePipelineV(p, lookup, nil)
}

// parsePipelineV is parsePipeline with the variables of the command's let.
func parsePipelineV(p bson.A, lookup collLookup, vars exprVars) ([]*stage, error) {
	stages := make([]*stage, 0, len(p))
	for _, raw := range p {
		st, err := parseStageV(raw, lookup, vars)
		if err != nil {
			return nil, err
		}
		stages = append(stages, st)
	}
	return stages, nil
}

func runStages(docs []bson.D, stages []*stage) ([]bson.D, error) {
	var err error
	for _, st := range stages {
		docs, err = st.run(docs)
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

func parseUnwind(arg any) (func([]bson.D) ([]bson.D, error), error) {
	var path, idxField string
	var preserve bool
	switch x := arg.(type) {
	case string:
		path = x
	case bson.D:
		for _, e := range x {
			switch e.Key {
			case "path":
				path, _ = e.Value.(string)
			case "includeArrayIndex":
				idxField, _ = e.Value.(string)
			case "preserveNullAndEmptyArrays":
				preserve = truthy(e.Value)
			default:
				return nil, newErr(28811, "unrecognized option to $unwind stage: %s", e.Key)
			}
		}
	default:
		return nil, newErr(15981, "expected either a string or an object as specification for $unwind stage, got %s", typeName(arg))
	}
	if !strings.HasPrefix(path, "$") || len(path) < 2 {
		return nil, newErr(28818, "path option to $unwind stage should be prefixed with a '$': %s", path)
	}
	parts := strings.Split(path[1:], ".")
	return func(in []bson.D) ([]bson.D, error) {
		var out []bson.D
		for _, doc := range in {
			v, ok := getPath(doc, path[1:])
			emit := func(val any, keep bool, idx any) error {
				d := copyDoc(doc)
				if keep {
					r, err := setIn(d, parts, val)
					if err != nil {
						return err
					}
					d = r.(bson.D)
				} else {
					d = unsetIn(d, parts).(bson.D)
				}
				if idxField != "" {
					r, err := setIn(d, strings.Split(idxField, "."), idx)
					if err != nil {
						return err
					}
					d = r.(bson.D)
				}
				out = append(out, d)
				return nil
			}
			arr, isArr := v.(bson.A)
			switch {
			case !ok || v == nil || (isArr && len(arr) == 0):
				if preserve {
					if err := emit(v, ok && !isArr, nil); err != nil {
						return nil, err
					}
				}
			case isArr:
				for i, e := range arr {
					if err := emit(e, true, int64(i)); err != nil {
						return nil, err
					}
				}
			default:
				if err := emit(v, true, nil); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}, nil
}

// ---- $group ----

type accumulator struct {
	field string
	op    string
	expr  any
}

type group struct {
	id   any
	accs []accumulator
}

func parseGroup(arg any) (*group, error) {
	d, ok := arg.(bson.D)
	if !ok {
		return nil, newErr(15947, "a group's fields must be specified in an object")
	}
	g := &group{}
	hasID := false
	for _, e := range d {
		if e.Key == "_id" {
			g.id, hasID = e.Value, true
			continue
		}
		ad, ok := e.Value.(bson.D)
		if !ok || len(ad) != 1 {
			return nil, newErr(40234, "The field '%s' must be an accumulator object", e.Key)
		}
		switch ad[0].Key {
		case "$sum", "$min", "$max", "$first", "$last", "$push", "$avg", "$addToSet", "$count":
		default:
			if strings.HasPrefix(ad[0].Key, "$") {
				return nil, newErr(15952, "unknown group operator '%s'", ad[0].Key)
			}
			return nil, newErr(40234, "The field '%s' must be an accumulator object", e.Key)
		}
		g.accs = append(g.accs, accumulator{field: e.Key, op: ad[0].Key, expr: ad[0].Value})
	}
	if !hasID {
		return nil, newErr(15955, "a group specification must include an _id")
	}
	return g, nil
}

type accState struct {
	sum     any
	count   int64
	val     any
	has     bool
	list    bson.A
	nonNums bool
}

func (g *group) run(in []bson.D) ([]bson.D, error) {
	type bucket struct {
		id     any
		states []*accState
	}
	var order []string
	buckets := map[string]*bucket{}
	for _, doc := range in {
		id, ok, err := evalExpr(g.id, doc)
		if err != nil {
			return nil, err
		}
		if !ok {
			id = nil
		}
		k := keyString(id)
		b := buckets[k]
		if b == nil {
			b = &bucket{id: id, states: make([]*accState, len(g.accs))}
			for i := range b.states {
				b.states[i] = &accState{sum: int32(0)}
			}
			buckets[k] = b
			order = append(order, k)
		}
		for i, a := range g.accs {
			s := b.states[i]
			var v any
			present := true
			if a.op == "$count" {
				v = int32(1)
			} else {
				v, present, err = evalExpr(a.expr, doc)
				if err != nil {
					return nil, err
				}
			}
			switch a.op {
			case "$sum", "$count", "$avg":
				if present && isNumber(v) {
					s.sum = addNumbers(s.sum, v)
					s.count++
				}
			case "$min", "$max":
				if !present || v == nil {
					continue
				}
				if !s.has {
					s.val, s.has = v, true
				} else if c := compareValues(v, s.val); (a.op == "$min" && c < 0) || (a.op == "$max" && c > 0) {
					s.val = v
				}
			case "$first":
				if !s.has {
					s.val, s.has = v, true
					if !present {
						s.val = nil
					}
				}
			case "$last":
				s.val, s.has = v, true
				if !present {
					s.val = nil
				}
			case "$push":
				if present {
					s.list = append(s.list, v)
				}
			case "$addToSet":
				if present {
					dup := false
					for _, x := range s.list {
						if valuesEqual(x, v) {
							dup = true
							break
						}
					}
					if !dup {
						s.list = append(s.list, v)
					}
				}
			}
		}
	}
	out := make([]bson.D, 0, len(order))
	for _, k := range order {
		b := buckets[k]
		d := bson.D{{Key: "_id", Value: b.id}}
		for i, a := range g.accs {
			s := b.states[i]
			var v any
			switch a.op {
			case "$sum", "$count":
				v = s.sum
			case "$avg":
				if s.count == 0 {
					v = nil
				} else {
					v = toFloat(s.sum) / float64(s.count)
				}
			case "$min", "$max", "$first", "$last":
				v = s.val
			case "$push", "$addToSet":
				v = s.list
				if s.list == nil {
					v = bson.A{}
				}
			}
			d = append(d, bson.E{Key: a.field, Value: v})
		}
		out = append(out, d)
	}
	return out, nil
}

// addNumbers adds with MongoDB's $sum type promotion.
func addNumbers(a, b any) any {
	_, ad := a.(bson.Decimal128)
	_, bd := b.(bson.Decimal128)
	_, af := a.(float64)
	_, bf := b.(float64)
	switch {
	case ad || bd:
		return arith("$inc", a, b)
	case af || bf:
		return toFloat(a) + toFloat(b)
	}
	x, _ := asInt64(a)
	y, _ := asInt64(b)
	r := x + y
	if (y > 0 && r < x) || (y < 0 && r > x) {
		return float64(x) + float64(y)
	}
	_, a32 := a.(int32)
	_, b32 := b.(int32)
	if a32 && b32 && r >= math.MinInt32 && r <= math.MaxInt32 {
		return int32(r)
	}
	return r
}
