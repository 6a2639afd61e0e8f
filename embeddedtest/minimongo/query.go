package minimongo

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// matcher reports whether a document matches a compiled query filter.
type matcher func(doc bson.D) bool

// valuesPred tests the values found at a path. missing reports that the
// path was absent in at least one branch of the traversal.
type valuesPred func(vals []any, missing bool) bool

func matchAll(bson.D) bool { return true }

// traverse returns the values at a dotted path, descending into arrays the
// way MongoDB does. Arrays found at the end of the path are not expanded.
func traverse(doc bson.D, path string) []any {
	vals, _ := traverseM(doc, strings.Split(path, "."))
	return vals
}

func traverseM(v any, parts []string) ([]any, bool) {
	if len(parts) == 0 {
		return []any{v}, false
	}
	switch x := v.(type) {
	case bson.D:
		f, ok := lookupField(x, parts[0])
		if !ok {
			return nil, true
		}
		return traverseM(f, parts[1:])
	case bson.A:
		if i, err := strconv.Atoi(parts[0]); err == nil {
			if i >= 0 && i < len(x) {
				return traverseM(x[i], parts[1:])
			}
			return nil, true
		}
		var out []any
		missing := false
		for _, e := range x {
			if d, ok := e.(bson.D); ok {
				r, m := traverseM(d, parts)
				out = append(out, r...)
				missing = missing || m
			}
		}
		return out, missing
	}
	return nil, true
}

// compileFilter compiles a query filter document.
func compileFilter(filter bson.D) (matcher, error) { return compileFilterV(filter, nil) }

// compileFilterV compiles a query filter whose $expr may use the variables of
// the command's let option.
func compileFilterV(filter bson.D, vars exprVars) (matcher, error) {
	if len(filter) == 0 {
		return matchAll, nil
	}
	var preds []matcher
	for _, e := range filter {
		p, err := compileElem(e, vars)
		if err != nil {
			return nil, err
		}
		if p != nil {
			preds = append(preds, p)
		}
	}
	return func(doc bson.D) bool {
		for _, p := range preds {
			if !p(doc) {
				return false
			}
		}
		return true
	}, nil
}

func compileElem(e bson.E, vars exprVars) (matcher, error) {
	if strings.HasPrefix(e.Key, "$") {
		switch e.Key {
		case "$and", "$or", "$nor":
			arr, ok := e.Value.(bson.A)
			if !ok || len(arr) == 0 {
				return nil, errBadValue(e.Key + " must be a nonempty array")
			}
			subs := make([]matcher, len(arr))
			for i, x := range arr {
				d, ok := x.(bson.D)
				if !ok {
					return nil, errBadValue(e.Key + " argument's entries must be objects")
				}
				m, err := compileFilterV(d, vars)
				if err != nil {
					return nil, err
				}
				subs[i] = m
			}
			switch e.Key {
			case "$and":
				return func(doc bson.D) bool {
					for _, m := range subs {
						if !m(doc) {
							return false
						}
					}
					return true
				}, nil
			case "$or":
				return func(doc bson.D) bool {
					for _, m := range subs {
						if m(doc) {
							return true
						}
					}
					return false
				}, nil
			default:
				return func(doc bson.D) bool {
					for _, m := range subs {
						if m(doc) {
							return false
						}
					}
					return true
				}, nil
			}
		case "$comment":
			return nil, nil
		case "$expr":
			expr := e.Value
			if _, _, err := evalExprV(expr, bson.D{}, vars); err != nil {
				if ce := asCmdError(err); ce.Code == codeInvalidPipelineOperator || ce.Code == 15983 {
					return nil, err
				}
			}
			return func(doc bson.D) bool {
				v, ok, err := evalExprV(expr, doc, vars)
				if err != nil {
					// matchers cannot return errors; dispatch turns this
					// back into the command's error
					panic(exprError{err})
				}
				return ok && truthy(v)
			}, nil
		case "$where", "$text", "$jsonSchema", "$sampleRate":
			return nil, errUnsupported("query operator " + e.Key)
		}
		return nil, errBadValue("unknown top level operator: " + e.Key + ". If you have a field name that starts with a '$' symbol, consider using $getField or $setField.")
	}
	pred, err := compileValueExpr(e.Value)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(e.Key, ".")
	return func(doc bson.D) bool {
		vals, missing := traverseM(doc, parts)
		return pred(vals, missing || len(vals) == 0)
	}, nil
}

func isOperatorDoc(v any) (bson.D, bool) {
	d, ok := v.(bson.D)
	if !ok || len(d) == 0 || !strings.HasPrefix(d[0].Key, "$") {
		return nil, false
	}
	return d, true
}

// compileValueExpr compiles the right-hand side of a field condition.
func compileValueExpr(v any) (valuesPred, error) {
	if d, ok := isOperatorDoc(v); ok {
		return compileOperators(d)
	}
	if re, ok := v.(bson.Regex); ok {
		return regexPred(re.Pattern, re.Options)
	}
	return eqPred(v), nil
}

func compileOperators(d bson.D) (valuesPred, error) {
	var preds []valuesPred
	var regexSeen bool
	for _, e := range d {
		if !strings.HasPrefix(e.Key, "$") {
			return nil, errBadValue("unknown operator: " + e.Key)
		}
		var p valuesPred
		var err error
		switch e.Key {
		case "$eq":
			p = eqPred(e.Value)
		case "$ne":
			if _, ok := e.Value.(bson.Regex); ok {
				return nil, errBadValue("Can't have regex as arg to $ne.")
			}
			q := eqPred(e.Value)
			p = func(vals []any, missing bool) bool { return !q(vals, missing) }
		case "$gt", "$gte", "$lt", "$lte":
			p = rangePred(e.Key, e.Value)
		case "$in", "$nin":
			arr, ok := e.Value.(bson.A)
			if !ok {
				return nil, errBadValue(e.Key + " needs an array")
			}
			var subs []valuesPred
			for _, x := range arr {
				if _, ok := isOperatorDoc(x); ok {
					return nil, errBadValue("cannot nest $ under " + e.Key)
				}
				if re, ok := x.(bson.Regex); ok {
					rp, err := regexPred(re.Pattern, re.Options)
					if err != nil {
						return nil, err
					}
					subs = append(subs, rp)
				} else {
					subs = append(subs, eqPred(x))
				}
			}
			in := func(vals []any, missing bool) bool {
				for _, s := range subs {
					if s(vals, missing) {
						return true
					}
				}
				return false
			}
			if e.Key == "$in" {
				p = in
			} else {
				p = func(vals []any, missing bool) bool { return !in(vals, missing) }
			}
		case "$exists":
			want := truthy(e.Value)
			p = func(vals []any, _ bool) bool { return (len(vals) > 0) == want }
		case "$type":
			p, err = typePred(e.Value)
		case "$size":
			n, ok := asInt64(e.Value)
			if !ok {
				return nil, errBadValue("$size needs a number")
			}
			if n < 0 {
				return nil, errBadValue("$size may not be negative")
			}
			p = func(vals []any, _ bool) bool {
				for _, v := range vals {
					if a, ok := v.(bson.A); ok && int64(len(a)) == n {
						return true
					}
				}
				return false
			}
		case "$all":
			arr, ok := e.Value.(bson.A)
			if !ok {
				return nil, errBadValue("$all needs an array")
			}
			var subs []valuesPred
			for _, x := range arr {
				if od, ok := isOperatorDoc(x); ok {
					if od[0].Key != "$elemMatch" {
						return nil, errBadValue("no $ expressions in $all")
					}
					sp, err := compileOperators(od)
					if err != nil {
						return nil, err
					}
					subs = append(subs, sp)
				} else if re, ok := x.(bson.Regex); ok {
					rp, err := regexPred(re.Pattern, re.Options)
					if err != nil {
						return nil, err
					}
					subs = append(subs, rp)
				} else {
					subs = append(subs, eqPred(x))
				}
			}
			p = func(vals []any, missing bool) bool {
				if len(subs) == 0 {
					return false
				}
				for _, s := range subs {
					if !s(vals, missing) {
						return false
					}
				}
				return true
			}
		case "$elemMatch":
			p, err = elemMatchPred(e.Value)
		case "$regex":
			if regexSeen {
				continue
			}
			regexSeen = true
			pattern, opts := "", ""
			switch x := e.Value.(type) {
			case string:
				pattern = x
			case bson.Regex:
				pattern, opts = x.Pattern, x.Options
			default:
				return nil, errBadValue("$regex has to be a string")
			}
			if o, ok := lookupField(d, "$options"); ok {
				s, ok := o.(string)
				if !ok {
					return nil, errBadValue("$options has to be a string")
				}
				opts = s
			}
			p, err = regexPred(pattern, opts)
		case "$options":
			if _, ok := lookupField(d, "$regex"); !ok {
				return nil, errBadValue("$options needs a $regex")
			}
			continue
		case "$not":
			var inner valuesPred
			switch x := e.Value.(type) {
			case bson.Regex:
				inner, err = regexPred(x.Pattern, x.Options)
			case bson.D:
				if len(x) == 0 {
					return nil, errBadValue("$not cannot be empty")
				}
				if _, ok := isOperatorDoc(x); !ok {
					return nil, errBadValue("$not needs a regex or a document")
				}
				inner, err = compileOperators(x)
			default:
				return nil, errBadValue("$not needs a regex or a document")
			}
			if err != nil {
				return nil, err
			}
			p = func(vals []any, missing bool) bool { return !inner(vals, missing) }
		case "$mod":
			arr, ok := e.Value.(bson.A)
			if !ok || len(arr) != 2 {
				return nil, errBadValue("malformed mod, needs to be an array")
			}
			div, ok1 := asInt64(arr[0])
			rem, ok2 := asInt64(arr[1])
			if !ok1 || !ok2 {
				return nil, errBadValue("malformed mod, divisor and remainder must be numbers")
			}
			if div == 0 {
				return nil, errBadValue("divisor cannot be 0")
			}
			p = anyElem(func(v any) bool {
				if !isNumber(v) {
					return false
				}
				f := toFloat(v)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					return false
				}
				return int64(f)%div == rem
			})
		case "$geoWithin", "$geoIntersects", "$near", "$nearSphere", "$bitsAllSet", "$bitsAnySet",
			"$bitsAllClear", "$bitsAnyClear", "$jsonSchema", "$where", "$text":
			return nil, errUnsupported("query operator " + e.Key)
		default:
			return nil, errBadValue("unknown operator: " + e.Key)
		}
		if err != nil {
			return nil, err
		}
		preds = append(preds, p)
	}
	return func(vals []any, missing bool) bool {
		for _, p := range preds {
			if !p(vals, missing) {
				return false
			}
		}
		return true
	}, nil
}

// anyElem matches when any value, or any element of an array value,
// satisfies f.
func anyElem(f func(v any) bool) valuesPred {
	return func(vals []any, _ bool) bool {
		for _, v := range vals {
			if f(v) {
				return true
			}
			if a, ok := v.(bson.A); ok {
				for _, e := range a {
					if f(e) {
						return true
					}
				}
			}
		}
		return false
	}
}

func eqPred(x any) valuesPred {
	if x == nil {
		return func(vals []any, missing bool) bool {
			if missing {
				return true
			}
			return anyElem(func(v any) bool {
				switch v.(type) {
				case nil, bson.Undefined:
					return true
				}
				return false
			})(vals, missing)
		}
	}
	return anyElem(func(v any) bool { return valuesEqual(v, x) })
}

func rangePred(op string, x any) valuesPred {
	test := func(c int) bool {
		switch op {
		case "$gt":
			return c > 0
		case "$gte":
			return c >= 0
		case "$lt":
			return c < 0
		}
		return c <= 0
	}
	cmpOK := func(v any) bool {
		if _, ok := x.(bson.MinKey); ok {
			return test(compareValues(v, x))
		}
		if _, ok := x.(bson.MaxKey); ok {
			return test(compareValues(v, x))
		}
		if typeRank(v) != typeRank(x) {
			return false
		}
		if isNumber(v) {
			vn, xn := isNaN(v), isNaN(x)
			if vn || xn {
				return vn && xn && (op == "$gte" || op == "$lte")
			}
		}
		return test(compareValues(v, x))
	}
	inner := anyElem(cmpOK)
	if x == nil && (op == "$gte" || op == "$lte") {
		eq := eqPred(nil)
		return func(vals []any, missing bool) bool { return eq(vals, missing) || inner(vals, missing) }
	}
	return inner
}

func regexPred(pattern, options string) (valuesPred, error) {
	re, err := compileRegex(pattern, options)
	if err != nil {
		return nil, err
	}
	return anyElem(func(v any) bool {
		switch s := v.(type) {
		case string:
			return re.MatchString(s)
		case bson.Symbol:
			return re.MatchString(string(s))
		case bson.Regex:
			return s.Pattern == pattern && s.Options == options
		}
		return false
	}), nil
}

func typePred(spec any) (valuesPred, error) {
	var codes []int32
	var number bool
	add := func(x any) error {
		switch t := x.(type) {
		case string:
			if t == "number" {
				number = true
				return nil
			}
			c, ok := typeAliases[t]
			if !ok {
				return errBadValue("Unknown type name alias: " + t)
			}
			codes = append(codes, c)
		default:
			n, ok := asInt64(t)
			if !ok {
				return errBadValue(fmt.Sprintf("type must be represented as a number or a string, got %s", typeName(x)))
			}
			codes = append(codes, int32(n))
		}
		return nil
	}
	if arr, ok := spec.(bson.A); ok {
		for _, x := range arr {
			if err := add(x); err != nil {
				return nil, err
			}
		}
	} else if err := add(spec); err != nil {
		return nil, err
	}
	matches := func(v any) bool {
		if number && isNumber(v) {
			return true
		}
		c := typeCode(v)
		for _, w := range codes {
			if w == c {
				return true
			}
		}
		return false
	}
	return anyElem(matches), nil
}

func elemMatchPred(spec any) (valuesPred, error) {
	d, ok := spec.(bson.D)
	if !ok {
		return nil, errBadValue("$elemMatch needs an Object")
	}
	var elemOK func(e any) bool
	if od, ok := isOperatorDoc(d); ok && od[0].Key != "$and" && od[0].Key != "$or" && od[0].Key != "$nor" {
		vp, err := compileOperators(od)
		if err != nil {
			return nil, err
		}
		elemOK = func(e any) bool { return vp([]any{e}, false) }
	} else {
		m, err := compileFilter(d)
		if err != nil {
			return nil, err
		}
		elemOK = func(e any) bool {
			ed, ok := e.(bson.D)
			return ok && m(ed)
		}
	}
	return func(vals []any, _ bool) bool {
		for _, v := range vals {
			if a, ok := v.(bson.A); ok {
				for _, e := range a {
					if elemOK(e) {
						return true
					}
				}
			}
		}
		return false
	}, nil
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case float64:
		return x
	case bson.Decimal128:
		n := toNum(x)
		switch {
		case n.nan:
			return math.NaN()
		case n.inf != 0:
			return math.Inf(n.inf)
		}
		f, _ := n.rat.Float64()
		return f
	}
	return math.NaN()
}

var _ = regexp.Compile

func isNaN(v any) bool {
	switch x := v.(type) {
	case float64:
		return math.IsNaN(x)
	case bson.Decimal128:
		return x.IsNaN()
	}
	return false
}

// exprError carries an expression evaluation error out of a matcher.
type exprError struct{ err error }
