package minimongo

import (
	"math"
	"math/rand/v2"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Aggregation expression operators. Each follows MongoDB's rules for null and
// missing arguments and its error codes; operators not listed here fail with
// InvalidPipelineOperator (168).

type exprFunc func(args []any, doc bson.D) (any, bool, error)

var exprOperators map[string]exprFunc

func init() {
	exprOperators = map[string]exprFunc{
		"$add":          exprAdd,
		"$subtract":     exprSubtract,
		"$multiply":     exprMultiply,
		"$divide":       exprDivide,
		"$mod":          exprMod,
		"$concat":       exprConcat,
		"$toUpper":      exprCase(strings.ToUpper),
		"$toLower":      exprCase(strings.ToLower),
		"$eq":           exprCompare(func(c int) bool { return c == 0 }),
		"$ne":           exprCompare(func(c int) bool { return c != 0 }),
		"$gt":           exprCompare(func(c int) bool { return c > 0 }),
		"$gte":          exprCompare(func(c int) bool { return c >= 0 }),
		"$lt":           exprCompare(func(c int) bool { return c < 0 }),
		"$lte":          exprCompare(func(c int) bool { return c <= 0 }),
		"$cmp":          exprCmp,
		"$and":          exprAnd,
		"$or":           exprOr,
		"$not":          exprNot,
		"$cond":         nil, // takes a document form too; handled in evalOperator
		"$setField":     nil, // named arguments; handled in evalOperator
		"$unsetField":   nil,
		"$getField":     nil,
		"$switch":       nil, // evaluates its branches lazily; handled in evalOperator
		"$max":          exprMinMax(true),
		"$min":          exprMinMax(false),
		"$mergeObjects": exprMergeObjects,
		"$ifNull":       exprIfNull,
		"$size":         exprSize,
		"$arrayElemAt":  exprArrayElemAt,
		"$in":           exprIn,
		"$type":         exprType,
		"$rand": func(args []any, _ bson.D) (any, bool, error) {
			if d, ok := args[0].(bson.D); !ok || len(d) != 0 {
				return nil, false, newErr(10065, "invalid parameter: expected an object ($rand)")
			}
			return rand.Float64(), true, nil
		},
	}
}

// evalOperator evaluates {op: arg}.
func evalOperator(op string, arg any, doc bson.D, vars exprVars) (any, bool, error) {
	switch op {
	case "$cond":
		return exprCond(arg, doc, vars)
	case "$switch":
		return exprSwitch(arg, doc, vars)
	case "$setField", "$unsetField", "$getField":
		return exprField(op, arg, doc, vars)
	}
	f, ok := exprOperators[op]
	if !ok || f == nil {
		return nil, false, newErr(codeInvalidPipelineOperator, "Unrecognized expression '%s'", op)
	}
	var raw []any
	if a, isArr := arg.(bson.A); isArr {
		raw = a
	} else {
		raw = []any{arg}
	}
	args := make([]any, len(raw))
	for i, r := range raw {
		v, present, err := evalExprV(r, doc, vars)
		if err != nil {
			return nil, false, err
		}
		if !present {
			v = missing{}
		}
		args[i] = v
	}
	return f(args, doc)
}

// missing marks an argument that evaluated to a missing field.
type missing struct{}

func nullish(v any) bool {
	switch v.(type) {
	case nil, missing, bson.Undefined:
		return true
	}
	return false
}

func argCount(op string, args []any, n int) error {
	if len(args) != n {
		return newErr(16020, "Expression %s takes exactly %d arguments. %d were passed in.", op, n, len(args))
	}
	return nil
}

func exprAdd(args []any, _ bson.D) (any, bool, error) {
	var sum any = int32(0)
	var date *bson.DateTime
	for _, a := range args {
		switch x := a.(type) {
		case nil, missing, bson.Undefined:
			return nil, true, nil
		case bson.DateTime:
			if date != nil {
				return nil, false, newErr(16612, "only one date allowed in an $add expression")
			}
			d := x
			date = &d
		default:
			if !isNumber(x) {
				return nil, false, newErr(14, "$add only supports numeric or date types, not %s", typeName(x))
			}
			sum = addNumbers(sum, x)
		}
	}
	if date != nil {
		return bson.DateTime(int64(*date) + int64(math.Round(toFloat(sum)))), true, nil
	}
	return sum, true, nil
}

func exprSubtract(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$subtract", args, 2); err != nil {
		return nil, false, err
	}
	a, b := args[0], args[1]
	if nullish(a) || nullish(b) {
		return nil, true, nil
	}
	da, aDate := a.(bson.DateTime)
	db, bDate := b.(bson.DateTime)
	switch {
	case aDate && bDate:
		return int64(da) - int64(db), true, nil
	case aDate && isNumber(b):
		return bson.DateTime(int64(da) - int64(math.Round(toFloat(b)))), true, nil
	case isNumber(a) && isNumber(b):
		return addNumbers(a, negate(b)), true, nil
	}
	return nil, false, newErr(16556, "cant $subtract a %s from a %s", typeName(b), typeName(a))
}

func negate(v any) any {
	switch x := v.(type) {
	case int32:
		if x == math.MinInt32 {
			return -int64(x)
		}
		return -x
	case int64:
		if x == math.MinInt64 {
			return -float64(x)
		}
		return -x
	case float64:
		return -x
	}
	return arith("$mul", v, int32(-1))
}

func exprMultiply(args []any, _ bson.D) (any, bool, error) {
	var prod any = int32(1)
	for _, a := range args {
		if nullish(a) {
			return nil, true, nil
		}
		if !isNumber(a) {
			return nil, false, newErr(16555, "$multiply only supports numeric types, not %s", typeName(a))
		}
		prod = arith("$mul", prod, a)
	}
	return prod, true, nil
}

func exprDivide(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$divide", args, 2); err != nil {
		return nil, false, err
	}
	a, b := args[0], args[1]
	if nullish(a) || nullish(b) {
		return nil, true, nil
	}
	if !isNumber(a) || !isNumber(b) {
		return nil, false, newErr(16609, "$divide only supports numeric types, not %s and %s", typeName(a), typeName(b))
	}
	if compareNumbers(b, int32(0)) == 0 {
		return nil, false, newErr(codeBadValue, "can't $divide by zero")
	}
	_, ad := a.(bson.Decimal128)
	_, bd := b.(bson.Decimal128)
	if ad || bd {
		x, y := toNum(a), toNum(b)
		if x.rat != nil && y.rat != nil {
			q := x.rat.Quo(x.rat, y.rat)
			if d, err := bson.ParseDecimal128(q.FloatString(20)); err == nil {
				return trimDecimal(d), true, nil
			}
		}
	}
	return toFloat(a) / toFloat(b), true, nil
}

func exprMod(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$mod", args, 2); err != nil {
		return nil, false, err
	}
	a, b := args[0], args[1]
	if nullish(a) || nullish(b) {
		return nil, true, nil
	}
	if !isNumber(a) || !isNumber(b) {
		return nil, false, newErr(16611, "$mod only supports numeric types, not %s and %s", typeName(a), typeName(b))
	}
	if compareNumbers(b, int32(0)) == 0 {
		return nil, false, newErr(16610, "can't $mod by zero")
	}
	_, af := a.(float64)
	_, bf := b.(float64)
	if af || bf {
		return math.Mod(toFloat(a), toFloat(b)), true, nil
	}
	x, _ := asInt64(a)
	y, _ := asInt64(b)
	_, a32 := a.(int32)
	_, b32 := b.(int32)
	if a32 && b32 {
		return int32(x % y), true, nil
	}
	return x % y, true, nil
}

func exprConcat(args []any, _ bson.D) (any, bool, error) {
	var sb strings.Builder
	for _, a := range args {
		if nullish(a) {
			return nil, true, nil
		}
		s, ok := a.(string)
		if !ok {
			return nil, false, newErr(16702, "$concat only supports strings, not %s", typeName(a))
		}
		sb.WriteString(s)
	}
	return sb.String(), true, nil
}

func exprCase(f func(string) string) exprFunc {
	return func(args []any, _ bson.D) (any, bool, error) {
		if err := argCount("$toUpper/$toLower", args, 1); err != nil {
			return nil, false, err
		}
		switch x := args[0].(type) {
		case nil, missing, bson.Undefined:
			return "", true, nil
		case string:
			return f(x), true, nil
		}
		if isNumber(args[0]) {
			return f(formatValue(args[0])), true, nil
		}
		return nil, false, newErr(16007, "can't convert from BSON type %s to String", typeName(args[0]))
	}
}

// cmpArgs compares two evaluated arguments. In expressions a missing field
// (like undefined) sorts after MinKey and before null.
func cmpArgs(args []any) int {
	a, b := args[0], args[1]
	rank := func(v any) int {
		switch v.(type) {
		case bson.MinKey:
			return 0
		case missing, bson.Undefined:
			return 1
		}
		return 2
	}
	ra, rb := rank(a), rank(b)
	if ra < 2 || rb < 2 {
		return cmpInt(int64(ra), int64(rb))
	}
	return compareValues(a, b)
}

func exprCompare(test func(int) bool) exprFunc {
	return func(args []any, _ bson.D) (any, bool, error) {
		if err := argCount("comparison", args, 2); err != nil {
			return nil, false, err
		}
		return test(cmpArgs(args)), true, nil
	}
}

func exprCmp(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$cmp", args, 2); err != nil {
		return nil, false, err
	}
	return int32(cmpArgs(args)), true, nil
}

func exprTruthy(v any) bool {
	if _, ok := v.(missing); ok {
		return false
	}
	return truthy(v)
}

func exprAnd(args []any, _ bson.D) (any, bool, error) {
	for _, a := range args {
		if !exprTruthy(a) {
			return false, true, nil
		}
	}
	return true, true, nil
}

func exprOr(args []any, _ bson.D) (any, bool, error) {
	for _, a := range args {
		if exprTruthy(a) {
			return true, true, nil
		}
	}
	return false, true, nil
}

func exprNot(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$not", args, 1); err != nil {
		return nil, false, err
	}
	return !exprTruthy(args[0]), true, nil
}

func exprCond(arg any, doc bson.D, vars exprVars) (any, bool, error) {
	var ifE, thenE, elseE any
	switch x := arg.(type) {
	case bson.A:
		if len(x) != 3 {
			return nil, false, newErr(16020, "Expression $cond takes exactly 3 arguments. %d were passed in.", len(x))
		}
		ifE, thenE, elseE = x[0], x[1], x[2]
	case bson.D:
		for _, e := range x {
			switch e.Key {
			case "if":
				ifE = e.Value
			case "then":
				thenE = e.Value
			case "else":
				elseE = e.Value
			default:
				return nil, false, newErr(17083, "Unrecognized parameter to $cond: %s", e.Key)
			}
		}
		if len(x) != 3 {
			return nil, false, newErr(17080, "Missing 'if', 'then' or 'else' parameter to $cond")
		}
	default:
		return nil, false, newErr(16020, "Expression $cond takes exactly 3 arguments. 1 were passed in.")
	}
	c, present, err := evalExprV(ifE, doc, vars)
	if err != nil {
		return nil, false, err
	}
	if present && truthy(c) {
		return evalExprV(thenE, doc, vars)
	}
	return evalExprV(elseE, doc, vars)
}

func exprSwitch(arg any, doc bson.D, vars exprVars) (any, bool, error) {
	spec, ok := arg.(bson.D)
	if !ok {
		return nil, false, newErr(40060, "$switch requires an object as an argument, found: %s", typeName(arg))
	}
	var branches bson.A
	var def any
	hasDef := false
	for _, e := range spec {
		switch e.Key {
		case "branches":
			a, ok := e.Value.(bson.A)
			if !ok {
				return nil, false, newErr(40061, "$switch expected an array for 'branches', found: %s", typeName(e.Value))
			}
			branches = a
		case "default":
			def, hasDef = e.Value, true
		default:
			return nil, false, newErr(40067, "$switch found an unknown argument: %s", e.Key)
		}
	}
	if len(branches) == 0 && !hasDef {
		return nil, false, newErr(40068, "$switch requires at least one branch.")
	}
	for _, b := range branches {
		bd, ok := b.(bson.D)
		if !ok {
			return nil, false, newErr(40062, "$switch expected each branch to be an object, found: %s", typeName(b))
		}
		caseE, hasCase := lookupField(bd, "case")
		thenE, hasThen := lookupField(bd, "then")
		for _, e := range bd {
			if e.Key != "case" && e.Key != "then" {
				return nil, false, newErr(40063, "$switch found an unknown argument to a branch: %s", e.Key)
			}
		}
		if !hasCase {
			return nil, false, newErr(40064, "$switch requires each branch have a 'case' expression")
		}
		if !hasThen {
			return nil, false, newErr(40065, "$switch requires each branch have a 'then' expression.")
		}
		c, present, err := evalExprV(caseE, doc, vars)
		if err != nil {
			return nil, false, err
		}
		if present && truthy(c) {
			return evalExprV(thenE, doc, vars)
		}
	}
	if !hasDef {
		return nil, false, newErr(40066, "$switch could not find a matching branch for an input, and no default was specified.")
	}
	return evalExprV(def, doc, vars)
}

// exprMinMax is $min and $max as expressions: the extreme of their
// arguments, or of the elements of a single array argument, ignoring null
// and missing values.
func exprMinMax(max bool) exprFunc {
	return func(args []any, _ bson.D) (any, bool, error) {
		vals := args
		if len(args) == 1 {
			if a, ok := args[0].(bson.A); ok {
				vals = a
			}
		}
		var best any
		found := false
		for _, v := range vals {
			if nullish(v) {
				continue
			}
			if !found {
				best, found = v, true
				continue
			}
			if c := compareValues(v, best); (max && c > 0) || (!max && c < 0) {
				best = v
			}
		}
		return best, true, nil
	}
}

func exprMergeObjects(args []any, _ bson.D) (any, bool, error) {
	vals := args
	if len(args) == 1 {
		if a, ok := args[0].(bson.A); ok {
			vals = a
		}
	}
	out := bson.D{}
	for _, v := range vals {
		if nullish(v) {
			continue
		}
		d, ok := v.(bson.D)
		if !ok {
			return nil, false, newErr(40400, "$mergeObjects requires object inputs, but input %s is of type %s", formatValue(v), typeName(v))
		}
		for _, e := range d {
			replaced := false
			for i := range out {
				if out[i].Key == e.Key {
					out[i].Value = e.Value
					replaced = true
					break
				}
			}
			if !replaced {
				out = append(out, e)
			}
		}
	}
	return out, true, nil
}

func exprIfNull(args []any, _ bson.D) (any, bool, error) {
	if len(args) < 2 {
		return nil, false, newErr(1257300, "$ifNull needs at least two arguments, had: %d", len(args))
	}
	for _, a := range args[:len(args)-1] {
		if !nullish(a) {
			return a, true, nil
		}
	}
	last := args[len(args)-1]
	if _, ok := last.(missing); ok {
		return nil, false, nil
	}
	return last, true, nil
}

func exprSize(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$size", args, 1); err != nil {
		return nil, false, err
	}
	a, ok := args[0].(bson.A)
	if !ok {
		return nil, false, newErr(17124, "The argument to $size must be an array. Type of argument: %s", typeNameOrMissing(args[0]))
	}
	return int32(len(a)), true, nil
}

func exprArrayElemAt(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$arrayElemAt", args, 2); err != nil {
		return nil, false, err
	}
	if nullish(args[0]) || nullish(args[1]) {
		return nil, true, nil
	}
	a, ok := args[0].(bson.A)
	if !ok {
		return nil, false, newErr(28689, "$arrayElemAt's first argument must be an array, but is %s", typeName(args[0]))
	}
	i, ok := asInt64(args[1])
	if !ok {
		return nil, false, newErr(28691, "$arrayElemAt's second argument must be a numeric value, but is %s", typeName(args[1]))
	}
	if i < 0 {
		i += int64(len(a))
	}
	if i < 0 || i >= int64(len(a)) {
		return nil, false, nil
	}
	return a[i], true, nil
}

func exprIn(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$in", args, 2); err != nil {
		return nil, false, err
	}
	a, ok := args[1].(bson.A)
	if !ok {
		return nil, false, newErr(40081, "$in requires an array as a second argument, found: %s", typeNameOrMissing(args[1]))
	}
	x := args[0]
	for _, e := range a {
		if valuesEqual(e, x) {
			return true, true, nil
		}
	}
	return false, true, nil
}

func exprType(args []any, _ bson.D) (any, bool, error) {
	if err := argCount("$type", args, 1); err != nil {
		return nil, false, err
	}
	return typeNameOrMissing(args[0]), true, nil
}

func typeNameOrMissing(v any) string {
	if _, ok := v.(missing); ok {
		return "missing"
	}
	return typeName(v)
}

// exprField evaluates $setField, $unsetField and $getField, which name fields
// that a field path cannot ('$'-prefixed or dotted names).
func exprField(op string, arg any, doc bson.D, vars exprVars) (any, bool, error) {
	var fieldE, inputE, valueE any = nil, "$$CURRENT", nil
	hasValue := false
	switch x := arg.(type) {
	case bson.D:
		if op == "$getField" && (len(x) == 0 || x[0].Key[0] == '$') {
			fieldE = x // {$getField: <expression>}
			break
		}
		for _, e := range x {
			switch {
			case e.Key == "field":
				fieldE = e.Value
			case e.Key == "input":
				inputE = e.Value
			case e.Key == "value" && op == "$setField":
				valueE, hasValue = e.Value, true
			default:
				return nil, false, newErr(4161101, "%s found an unknown argument: %s", op, e.Key)
			}
		}
	default:
		if op != "$getField" {
			return nil, false, newErr(4161100, "%s only supports an object as its argument", op)
		}
		fieldE = arg
	}
	if fieldE == nil {
		return nil, false, newErr(4161102, "%s requires 'field' to be specified", op)
	}
	if op == "$setField" && !hasValue {
		return nil, false, newErr(4161103, "$setField requires 'value' to be specified")
	}
	fv, _, err := evalExprV(fieldE, doc, vars)
	if err != nil {
		return nil, false, err
	}
	field, ok := fv.(string)
	if !ok {
		return nil, false, newErr(4161106, "%s requires 'field' to evaluate to type String, but got %s", op, typeNameOrMissing(fv))
	}
	in, present, err := evalExprV(inputE, doc, vars)
	if err != nil {
		return nil, false, err
	}
	if !present || nullish(in) {
		return nil, true, nil
	}
	input, ok := in.(bson.D)
	if !ok {
		if op == "$getField" {
			return nil, false, newErr(3041705, "$getField requires 'input' to evaluate to type Object, but got %s", typeName(in))
		}
		return nil, false, newErr(4161105, "%s requires 'input' to evaluate to type Object", op)
	}
	if op == "$getField" {
		v, ok := lookupField(input, field)
		return v, ok, nil
	}
	var val any
	remove := op == "$unsetField"
	if !remove {
		v, present, err := evalExprV(valueE, doc, vars)
		if err != nil {
			return nil, false, err
		}
		val, remove = v, !present
	}
	out := make(bson.D, 0, len(input)+1)
	found := false
	for _, e := range input {
		if e.Key == field {
			found = true
			if !remove {
				out = append(out, bson.E{Key: field, Value: val})
			}
			continue
		}
		out = append(out, e)
	}
	if !found && !remove {
		out = append(out, bson.E{Key: field, Value: val})
	}
	return out, true, nil
}
