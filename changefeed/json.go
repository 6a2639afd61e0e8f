package changefeed

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus/internal/jsonenc"
)

// appendJSON appends v as JSON, in the mapping the package doc describes ("Payloads"): plain
// JSON values for what JSON has (objects, arrays, strings, numbers, booleans, null) and
// strings for what it does not (ObjectId as hex, dates in RFC 3339, Decimal128 as its decimal
// text, binary as base64, UUIDs in their canonical form).
func appendJSON(dst []byte, v bson.RawValue) ([]byte, error) {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		return appendDocJSON(dst, v.Value)
	case bson.TypeArray:
		dst = append(dst, '[')
		first := true
		err := eachElem(v.Value, func(_ []byte, x bson.RawValue) error {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			var err error
			dst, err = appendJSON(dst, x)
			return err
		})
		if err != nil {
			return dst, err
		}
		return append(dst, ']'), nil
	case bson.TypeString:
		s, ok := v.StringValueOK()
		if !ok {
			return dst, errBadBSON(v)
		}
		return appendString(dst, s), nil
	case bson.TypeSymbol:
		return appendString(dst, v.Symbol()), nil
	case bson.TypeJavaScript:
		return appendString(dst, v.JavaScript()), nil
	case bson.TypeCodeWithScope:
		code, _ := v.CodeWithScope()
		return appendString(dst, code), nil
	case bson.TypeInt32:
		return strconv.AppendInt(dst, int64(v.Int32()), 10), nil
	case bson.TypeInt64:
		return strconv.AppendInt(dst, v.Int64(), 10), nil
	case bson.TypeDouble:
		return appendFloat(dst, v.Double()), nil
	case bson.TypeDecimal128:
		return appendString(dst, decimalText(v.Decimal128())), nil
	case bson.TypeBoolean:
		return strconv.AppendBool(dst, v.Boolean()), nil
	case bson.TypeNull, bson.TypeUndefined:
		return append(dst, "null"...), nil
	case bson.TypeObjectID:
		oid := v.ObjectID()
		dst = append(dst, '"')
		dst = hex.AppendEncode(dst, oid[:])
		return append(dst, '"'), nil
	case bson.TypeDateTime:
		dst = append(dst, '"')
		dst = time.UnixMilli(v.DateTime()).UTC().AppendFormat(dst, dateLayout)
		return append(dst, '"'), nil
	case bson.TypeTimestamp:
		t, i := v.Timestamp()
		dst = append(dst, `{"t":`...)
		dst = strconv.AppendUint(dst, uint64(t), 10)
		dst = append(dst, `,"i":`...)
		dst = strconv.AppendUint(dst, uint64(i), 10)
		return append(dst, '}'), nil
	case bson.TypeBinary:
		sub, data := v.Binary()
		if (sub == 0x04 || sub == 0x03) && len(data) == 16 {
			return appendString(dst, uuidText(data)), nil
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, data)
		return append(dst, '"'), nil
	case bson.TypeRegex:
		p, o := v.Regex()
		return appendString(dst, "/"+p+"/"+o), nil
	case bson.TypeDBPointer:
		ns, oid := v.DBPointer()
		return appendString(dst, ns+"/"+oid.Hex()), nil
	case bson.TypeMinKey:
		return appendString(dst, "MinKey"), nil
	case bson.TypeMaxKey:
		return appendString(dst, "MaxKey"), nil
	}
	return dst, fmt.Errorf("changefeed: unknown BSON type 0x%02x", byte(v.Type))
}

// dateLayout is RFC 3339 with milliseconds.
const dateLayout = "2006-01-02T15:04:05.000Z07:00"

// appendDocJSON appends the document d as a JSON object, keeping its field order.
func appendDocJSON(dst []byte, d []byte) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	err := eachElem(d, func(key []byte, v bson.RawValue) error {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, key)
		dst = append(dst, ':')
		var err error
		dst, err = appendJSON(dst, v)
		return err
	})
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// eachElem calls fn for every element of the BSON document (or array) doc, in order, without
// allocating.
func eachElem(doc []byte, fn func(key []byte, v bson.RawValue) error) error {
	length, _, ok := bsoncore.ReadLength(doc)
	if !ok || length < 5 || int(length) > len(doc) || doc[length-1] != 0 {
		return fmt.Errorf("changefeed: malformed BSON document")
	}
	rem := doc[4 : length-1]
	for len(rem) > 0 {
		el, next, ok := bsoncore.ReadElement(rem)
		if !ok {
			return fmt.Errorf("changefeed: malformed BSON element")
		}
		key, err := el.KeyBytesErr()
		if err != nil {
			return fmt.Errorf("changefeed: malformed BSON element: %w", err)
		}
		val, err := el.ValueErr()
		if err != nil {
			return fmt.Errorf("changefeed: malformed BSON element %q: %w", key, err)
		}
		if err := fn(key, bson.RawValue{Type: bson.Type(val.Type), Value: val.Data}); err != nil {
			return err
		}
		rem = next
	}
	return nil
}

func errBadBSON(v bson.RawValue) error {
	return fmt.Errorf("changefeed: malformed BSON value of type %s", v.Type)
}

// appendFloat appends f as a JSON number; NaN and the infinities, which JSON cannot hold, as
// the strings "NaN", "Infinity" and "-Infinity".
func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

func uuidText(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// decimalText renders a Decimal128 as a plain decimal number without exponent or trailing
// zeros ("1.50" → "1.5", "1E+3" → "1000"), so that equal values read alike; NaN and the
// infinities as "NaN", "Infinity", "-Infinity".
func decimalText(d bson.Decimal128) string {
	s := d.String()
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return s
	}
	bi, exp, err := d.BigInt()
	if err != nil {
		return s
	}
	r := new(big.Rat).SetInt(bi)
	if exp > 0 {
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil)))
	} else if exp < 0 {
		r.Quo(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-exp)), nil)))
	}
	return ratText(r, max(0, -exp))
}

// ratText renders r, which has at most prec decimal places, without trailing zeros.
func ratText(r *big.Rat, prec int) string {
	s := r.FloatString(prec)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// appendString appends s as a JSON string (jsonenc.AppendString).
func appendString[S ~string | ~[]byte](dst []byte, s S) []byte { return jsonenc.AppendString(dst, s) }
