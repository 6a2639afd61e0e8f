package changefeed

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Key returns the event key of a document's _id, written canonically so that every jetbus
// client computes the same key for the same document, and two documents never share one (a
// key is a view document and orders a partition: two documents on one key would overwrite
// each other):
//
//   - an ObjectId: its 24 lowercase hex digits;
//   - a number (int32, int64, double, Decimal128): its exact value in decimal, without
//     exponent or trailing zeros, so that 7, 7.0 and NumberDecimal("7.00") — one _id to
//     MongoDB's unique index — give the one key "7", while the double 0.1 (exactly
//     0.1000000000000000055511151231257827021181583404541015625) and NumberDecimal("0.1"),
//     two _ids to MongoDB, give two keys; NaN and the infinities as "NaN", "Infinity",
//     "-Infinity";
//   - a string (or a symbol, which MongoDB compares as a string): the string as is, unless
//     it could be read as one of the other forms — 24 lowercase hex digits; a number as
//     above (an optional "-", digits without a leading zero, an optional fraction not
//     ending in 0); NaN, Infinity, -Infinity; true, false, null; or anything starting with
//     "{", "[" or a double quote — then JSON-quoted: the string "7" is the key "\"7\"",
//     "64b7f0c2a1b2c3d4e5f60718" is "\"64b7f0c2a1b2c3d4e5f60718\"" (quotes and backslashes
//     escaped, control characters as \u00XX, every other byte as it is);
//   - any other type (documents, UUIDs and other binary, dates, booleans, null, …): its
//     canonical Extended JSON (MongoDB Extended JSON v2), e.g. {"$date":{"$numberLong":"0"}};
//     one holding a string that is not valid UTF-8, which Extended JSON cannot write
//     exactly, {"$bson":"<its BSON type in 2 hex digits>:<its BSON value in base64>"}.
//
// The forms do not overlap: a string that reads as another form is quoted, and nothing but
// a quoted string starts with a double quote. So distinct _ids give distinct keys. Numbers
// nested in a document _id keep their type in its Extended JSON: {a: 1} and {a: 1.0}, one
// _id to MongoDB, give two keys; a document's _id cannot change, so this matters only to a
// document deleted and inserted again with its _id's numbers typed differently.
//
// A key longer than jetbus.MaxKeyLength (a double's exact decimal below about 1e-290, a
// large document) is not a valid event key: the change is dead-lettered.
func Key(id bson.RawValue) (string, error) {
	switch id.Type {
	case bson.TypeObjectID:
		oid, ok := id.ObjectIDOK()
		if !ok {
			return "", errBadBSON(id)
		}
		return oid.Hex(), nil
	case bson.TypeString, bson.TypeSymbol: // one type to MongoDB's comparisons
		s, _, ok := bsoncore.ReadString(id.Value)
		if !ok {
			return "", errBadBSON(id)
		}
		if ambiguousString(s) {
			return quoteKey(s), nil
		}
		return s, nil
	case bson.TypeInt32:
		return strconv.FormatInt(int64(id.Int32()), 10), nil
	case bson.TypeInt64:
		return strconv.FormatInt(id.Int64(), 10), nil
	case bson.TypeDouble:
		return floatKey(id.Double()), nil
	case bson.TypeDecimal128:
		return decimalText(id.Decimal128()), nil
	case 0:
		return "", fmt.Errorf("changefeed: the document has no _id")
	}
	if !validUTF8(id) {
		return "{\"$bson\":\"" + hex.EncodeToString([]byte{byte(id.Type)}) + ":" + base64.StdEncoding.EncodeToString(id.Value) + "\"}", nil
	}
	return canonicalExtJSON(id)
}

// floatKey writes f's exact value in decimal without exponent or trailing zeros
// (1e21 → "1000000000000000000000", 0.5 → "0.5", 0.1 → "0.1000000000000000055511151231257827021181583404541015625"),
// as decimalText writes a Decimal128 and FormatInt an integer: equal numbers read alike
// whatever their type, and unequal ones never do.
func floatKey(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0" // and -0
	case f == math.Trunc(f) && math.Abs(f) < 1<<53:
		return strconv.FormatInt(int64(f), 10)
	}
	r := new(big.Rat).SetFloat64(f)
	// A double is m/2^k: its exact decimal has k places.
	return ratText(r, r.Denom().BitLen()-1)
}

// ambiguousString reports whether the string s, written as is, could be read as the key of
// an _id of another type (Key): then it is quoted.
func ambiguousString(s string) bool {
	if s == "" {
		return false
	}
	switch s[0] {
	case '{', '[', '"':
		return true
	}
	switch s {
	case "NaN", "Infinity", "-Infinity", "true", "false", "null":
		return true
	}
	return isObjectIDHex(s) || isDecimalKey(s)
}

// isObjectIDHex reports whether s is 24 lowercase hex digits.
func isObjectIDHex(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isDecimalKey reports whether s has the form of a number's key: -?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?.
func isDecimalKey(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	start := i
	n := digits()
	if n == 0 || (n > 1 && s[start] == '0') {
		return false
	}
	if i == len(s) {
		return true
	}
	if s[i] != '.' {
		return false
	}
	i++
	if digits() == 0 || i != len(s) {
		return false
	}
	return s[len(s)-1] != '0'
}

// quoteKey writes s as a JSON string: quotes and backslashes escaped, control characters
// (and DEL) as \u00XX, every other byte as it is — so that distinct strings, valid UTF-8 or
// not, are quoted distinctly.
func quoteKey(s string) string {
	const hexDigits = "0123456789abcdef"
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// validUTF8 reports whether every string and field name in v is valid UTF-8.
func validUTF8(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeString, bson.TypeSymbol, bson.TypeJavaScript:
		s, _, ok := bsoncore.ReadString(v.Value)
		return ok && utf8.ValidString(s)
	case bson.TypeRegex:
		p, o, ok := bsoncore.Value{Type: bsoncore.TypeRegex, Data: v.Value}.RegexOK()
		return ok && utf8.ValidString(p) && utf8.ValidString(o)
	case bson.TypeDBPointer:
		ns, _, ok := bsoncore.Value{Type: bsoncore.TypeDBPointer, Data: v.Value}.DBPointerOK()
		return ok && utf8.ValidString(ns)
	case bson.TypeCodeWithScope:
		code, scope, ok := bsoncore.Value{Type: bsoncore.TypeCodeWithScope, Data: v.Value}.CodeWithScopeOK()
		return ok && utf8.ValidString(code) && validUTF8(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: scope})
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		elems, err := bsoncore.Document(v.Value).Elements()
		if err != nil {
			return false
		}
		for _, e := range elems {
			if !utf8.ValidString(e.Key()) {
				return false
			}
			ev := e.Value()
			if !validUTF8(bson.RawValue{Type: bson.Type(ev.Type), Value: ev.Data}) {
				return false
			}
		}
	}
	return true
}

// canonicalExtJSON renders one value as canonical Extended JSON.
func canonicalExtJSON(v bson.RawValue) (string, error) {
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, true, false)
	if err != nil {
		return "", fmt.Errorf("changefeed: render key as Extended JSON: %w", err)
	}
	// {"v":<value>}
	if len(b) < 6 {
		return "", fmt.Errorf("changefeed: render key as Extended JSON: unexpected %q", b)
	}
	return string(b[5 : len(b)-1]), nil
}
