package minimongo

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Values inside documents are the Go types produced by unmarshalling BSON
// into bson.D: nested documents are bson.D, arrays bson.A, null is nil.

// canonical type order used by MongoDB when comparing values of different
// BSON types.
func typeRank(v any) int {
	switch v.(type) {
	case bson.MinKey:
		return 1
	case emptyArray:
		return 2
	case nil, bson.Undefined, bson.Null:
		return 3
	case int32, int64, float64, bson.Decimal128, int:
		return 4
	case string, bson.Symbol:
		return 5
	case bson.D, bson.M:
		return 6
	case bson.A:
		return 7
	case bson.Binary:
		return 8
	case bson.ObjectID:
		return 9
	case bool:
		return 10
	case bson.DateTime:
		return 11
	case bson.Timestamp:
		return 12
	case bson.Regex:
		return 13
	case bson.DBPointer:
		return 14
	case bson.JavaScript:
		return 15
	case bson.CodeWithScope:
		return 16
	case bson.MaxKey:
		return 100
	}
	return 50
}

func isNumber(v any) bool {
	switch v.(type) {
	case int32, int64, float64, bson.Decimal128, int:
		return true
	}
	return false
}

// numeric representation used for comparisons across int32, int64, double
// and decimal128.
type num struct {
	nan bool
	inf int // -1, 0, +1
	rat *big.Rat
}

func toNum(v any) num {
	switch x := v.(type) {
	case int32:
		return num{rat: new(big.Rat).SetInt64(int64(x))}
	case int64:
		return num{rat: new(big.Rat).SetInt64(x)}
	case int:
		return num{rat: new(big.Rat).SetInt64(int64(x))}
	case float64:
		if math.IsNaN(x) {
			return num{nan: true}
		}
		if math.IsInf(x, 1) {
			return num{inf: 1}
		}
		if math.IsInf(x, -1) {
			return num{inf: -1}
		}
		r := new(big.Rat)
		r.SetFloat64(x)
		return num{rat: r}
	case bson.Decimal128:
		if x.IsNaN() {
			return num{nan: true}
		}
		if i := x.IsInf(); i != 0 {
			return num{inf: i}
		}
		bi, exp, err := x.BigInt()
		if err != nil {
			return num{nan: true}
		}
		r := new(big.Rat).SetInt(bi)
		if exp > 0 {
			r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil)))
		} else if exp < 0 {
			r.Quo(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-exp)), nil)))
		}
		return num{rat: r}
	}
	return num{nan: true}
}

func compareNumbers(a, b any) int {
	switch x := a.(type) {
	case int32:
		switch y := b.(type) {
		case int32:
			return cmpInt(int64(x), int64(y))
		case int64:
			return cmpInt(int64(x), y)
		}
	case int64:
		switch y := b.(type) {
		case int32:
			return cmpInt(x, int64(y))
		case int64:
			return cmpInt(x, y)
		}
	case float64:
		if y, ok := b.(float64); ok && !math.IsNaN(x) && !math.IsNaN(y) {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	na, nb := toNum(a), toNum(b)
	switch {
	case na.nan && nb.nan:
		return 0
	case na.nan:
		return -1
	case nb.nan:
		return 1
	case na.inf != 0 || nb.inf != 0:
		return cmpInt(int64(na.inf), int64(nb.inf))
	}
	return na.rat.Cmp(nb.rat)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareValues orders two values the way MongoDB does.
func compareValues(a, b any) int {
	ra, rb := typeRank(a), typeRank(b)
	if ra != rb {
		return cmpInt(int64(ra), int64(rb))
	}
	switch x := a.(type) {
	case int32, int64, float64, bson.Decimal128, int:
		return compareNumbers(a, b)
	case string:
		return strings.Compare(x, stringOf(b))
	case bson.Symbol:
		return strings.Compare(string(x), stringOf(b))
	case bson.D:
		y := b.(bson.D)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := cmpInt(int64(typeRank(x[i].Value)), int64(typeRank(y[i].Value))); c != 0 {
				return c
			}
			if c := strings.Compare(x[i].Key, y[i].Key); c != 0 {
				return c
			}
			if c := compareValues(x[i].Value, y[i].Value); c != 0 {
				return c
			}
		}
		return cmpInt(int64(len(x)), int64(len(y)))
	case bson.A:
		y := b.(bson.A)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compareValues(x[i], y[i]); c != 0 {
				return c
			}
		}
		return cmpInt(int64(len(x)), int64(len(y)))
	case bson.Binary:
		y := b.(bson.Binary)
		if c := cmpInt(int64(len(x.Data)), int64(len(y.Data))); c != 0 {
			return c
		}
		if c := cmpInt(int64(x.Subtype), int64(y.Subtype)); c != 0 {
			return c
		}
		return bytes.Compare(x.Data, y.Data)
	case bson.ObjectID:
		y := b.(bson.ObjectID)
		return bytes.Compare(x[:], y[:])
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case bson.DateTime:
		return cmpInt(int64(x), int64(b.(bson.DateTime)))
	case bson.Timestamp:
		y := b.(bson.Timestamp)
		if x.T != y.T {
			return cmpInt(int64(x.T), int64(y.T))
		}
		return cmpInt(int64(x.I), int64(y.I))
	case bson.Regex:
		y := b.(bson.Regex)
		if c := strings.Compare(x.Pattern, y.Pattern); c != 0 {
			return c
		}
		return strings.Compare(x.Options, y.Options)
	case bson.JavaScript:
		return strings.Compare(string(x), string(b.(bson.JavaScript)))
	}
	return 0
}

func stringOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bson.Symbol:
		return string(x)
	}
	return ""
}

func valuesEqual(a, b any) bool { return compareValues(a, b) == 0 }

// keyString returns a string that is equal for two values exactly when
// MongoDB considers them equal (numbers compare by value across types).
func keyString(v any) string {
	var sb strings.Builder
	writeKey(&sb, v)
	return sb.String()
}

func writeKey(sb *strings.Builder, v any) {
	sb.WriteByte(byte(typeRank(v)))
	switch x := v.(type) {
	case int32:
		sb.WriteString(strconv.FormatInt(int64(x), 10))
	case int64:
		sb.WriteString(strconv.FormatInt(x, 10))
	case int:
		sb.WriteString(strconv.Itoa(x))
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			sb.WriteString(strconv.FormatInt(int64(x), 10))
			return
		}
		writeNumKey(sb, x)
	case bson.Decimal128:
		writeNumKey(sb, x)
	case string:
		sb.WriteString(strconv.Itoa(len(x)))
		sb.WriteByte(':')
		sb.WriteString(x)
	case bson.Symbol:
		sb.WriteString(strconv.Itoa(len(x)))
		sb.WriteByte(':')
		sb.WriteString(string(x))
	case bson.ObjectID:
		sb.Write(x[:])
	case bool:
		if x {
			sb.WriteByte('t')
		} else {
			sb.WriteByte('f')
		}
	case bson.DateTime:
		sb.WriteString(strconv.FormatInt(int64(x), 10))
	case nil, bson.Null, bson.Undefined, bson.MinKey, bson.MaxKey, emptyArray:
	case bson.D:
		sb.WriteByte('{')
		for _, e := range x {
			sb.WriteString(strconv.Itoa(len(e.Key)))
			sb.WriteByte(':')
			sb.WriteString(e.Key)
			writeKey(sb, e.Value)
			sb.WriteByte(',')
		}
		sb.WriteByte('}')
	case bson.A:
		sb.WriteByte('[')
		for _, e := range x {
			writeKey(sb, e)
			sb.WriteByte(',')
		}
		sb.WriteByte(']')
	case bson.Binary:
		sb.WriteString(strconv.Itoa(int(x.Subtype)))
		sb.WriteByte(':')
		sb.WriteString(strconv.Itoa(len(x.Data)))
		sb.WriteByte(':')
		sb.Write(x.Data)
	default:
		fmt.Fprintf(sb, "%#v", x)
	}
}

// writeNumKey encodes a number that is not a small integer; integral values
// use the same form as int64 so that equal numbers share a key.
func writeNumKey(sb *strings.Builder, v any) {
	n := toNum(v)
	switch {
	case n.nan:
		sb.WriteString("nan")
	case n.inf != 0:
		sb.WriteString(strconv.Itoa(n.inf) + "inf")
	case n.rat.IsInt() && n.rat.Num().IsInt64() && math.Abs(float64(n.rat.Num().Int64())) < 1<<62:
		sb.WriteString(strconv.FormatInt(n.rat.Num().Int64(), 10))
	default:
		sb.WriteString(n.rat.RatString())
	}
}

// identical reports whether two values are the same BSON value of the same
// type (field order included).
func identical(a, b any) bool {
	switch x := a.(type) {
	case bson.D:
		y, ok := b.(bson.D)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i].Key != y[i].Key || !identical(x[i].Value, y[i].Value) {
				return false
			}
		}
		return true
	case bson.A:
		y, ok := b.(bson.A)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !identical(x[i], y[i]) {
				return false
			}
		}
		return true
	case bson.Binary:
		y, ok := b.(bson.Binary)
		return ok && x.Subtype == y.Subtype && bytes.Equal(x.Data, y.Data)
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y))) && math.Signbit(x) == math.Signbit(y)
	case bson.CodeWithScope:
		y, ok := b.(bson.CodeWithScope)
		return ok && x.Code == y.Code && identical(x.Scope, y.Scope)
	}
	defer func() { _ = recover() }()
	return a == b
}

// typeName returns MongoDB's alias for the BSON type of v.
func typeName(v any) string {
	switch v.(type) {
	case float64:
		return "double"
	case string:
		return "string"
	case bson.D:
		return "object"
	case bson.A:
		return "array"
	case bson.Binary:
		return "binData"
	case bson.Undefined:
		return "undefined"
	case bson.ObjectID:
		return "objectId"
	case bool:
		return "bool"
	case bson.DateTime:
		return "date"
	case nil, bson.Null:
		return "null"
	case bson.Regex:
		return "regex"
	case bson.DBPointer:
		return "dbPointer"
	case bson.JavaScript:
		return "javascript"
	case bson.Symbol:
		return "symbol"
	case bson.CodeWithScope:
		return "javascriptWithScope"
	case int32:
		return "int"
	case bson.Timestamp:
		return "timestamp"
	case int64:
		return "long"
	case bson.Decimal128:
		return "decimal"
	case bson.MinKey:
		return "minKey"
	case bson.MaxKey:
		return "maxKey"
	}
	return "unknown"
}

var typeAliases = map[string]int32{
	"double": 1, "string": 2, "object": 3, "array": 4, "binData": 5, "undefined": 6,
	"objectId": 7, "bool": 8, "date": 9, "null": 10, "regex": 11, "dbPointer": 12,
	"javascript": 13, "symbol": 14, "javascriptWithScope": 15, "int": 16, "timestamp": 17,
	"long": 18, "decimal": 19, "minKey": -1, "maxKey": 127,
}

func typeCode(v any) int32 {
	if c, ok := typeAliases[typeName(v)]; ok {
		return c
	}
	return 0
}

// lookupField returns the value of a top-level field.
func lookupField(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// getPath returns the value at a dotted path without traversing arrays
// except through numeric components.
func getPath(d bson.D, path string) (any, bool) {
	var cur any = d
	for _, part := range strings.Split(path, ".") {
		switch x := cur.(type) {
		case bson.D:
			v, ok := lookupField(x, part)
			if !ok {
				return nil, false
			}
			cur = v
		case bson.A:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// deepCopy returns a copy of v sharing no mutable structure with it.
func deepCopy(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: e.Key, Value: deepCopy(e.Value)}
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

func copyDoc(d bson.D) bson.D {
	if d == nil {
		return nil
	}
	return deepCopy(d).(bson.D)
}

// formatValue renders a value in the shell-like notation MongoDB uses in
// error messages.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case int32:
		return strconv.Itoa(int(x))
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', 1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bson.D:
		if len(x) == 0 {
			return "{}"
		}
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = e.Key + ": " + formatValue(e.Value)
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case bson.A:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatValue(e)
		}
		return "[ " + strings.Join(parts, ", ") + " ]"
	case bson.ObjectID:
		return "ObjectId('" + x.Hex() + "')"
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case bson.DateTime:
		return "new Date(" + strconv.FormatInt(int64(x), 10) + ")"
	}
	return fmt.Sprint(v)
}

// compileRegex translates a BSON regular expression into a Go one.
func compileRegex(pattern, options string) (*regexp.Regexp, error) {
	flags := ""
	for _, o := range options {
		switch o {
		case 'i', 'm', 's':
			flags += string(o)
		default:
			return nil, errBadValue(fmt.Sprintf("invalid flag in regex options: %c", o))
		}
	}
	if flags != "" {
		pattern = "(?" + flags + ")" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, &cmdError{Code: 51091, CodeName: "Location51091", Msg: "Regular expression is invalid: " + err.Error()}
	}
	return re, nil
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) {
			return int64(x), true
		}
	case bson.Decimal128:
		n := toNum(x)
		if n.rat != nil && n.rat.IsInt() {
			return n.rat.Num().Int64(), true
		}
	}
	return 0, false
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil, bson.Undefined:
		return false
	case bool:
		return x
	case int32, int64, float64, bson.Decimal128, int:
		return compareNumbers(x, int32(0)) != 0
	}
	return true
}
