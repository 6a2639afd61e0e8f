package changefeed

import (
	"fmt"
	"math"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Key returns the event key of a document's _id, written canonically so that every jetbus
// client computes the same key for the same document:
//
//   - an ObjectId: its 24 lowercase hex digits;
//   - a string: the string as is;
//   - a number (int32, int64, double, Decimal128): its value in decimal, without exponent
//     or trailing zeros, so that 7, 7.0 and NumberDecimal("7.00") — one _id to MongoDB's
//     unique index — give the one key "7"; NaN and the infinities as "NaN", "Infinity",
//     "-Infinity";
//   - any other type (documents, UUIDs and other binary, dates, booleans, …): its canonical
//     Extended JSON (MongoDB Extended JSON v2), e.g. {"$date":{"$numberLong":"0"}}.
func Key(id bson.RawValue) (string, error) {
	switch id.Type {
	case bson.TypeObjectID:
		oid, ok := id.ObjectIDOK()
		if !ok {
			return "", errBadBSON(id)
		}
		return oid.Hex(), nil
	case bson.TypeString:
		s, ok := id.StringValueOK()
		if !ok {
			return "", errBadBSON(id)
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
	return canonicalExtJSON(id)
}

// floatKey writes f in decimal without exponent (1e21 → "1000000000000000000000").
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
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
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
