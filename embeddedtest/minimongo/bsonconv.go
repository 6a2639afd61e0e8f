package minimongo

import (
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Conversions between raw BSON (read and written with the driver's bsoncore package) and
// the in-memory values documents are stored as. They avoid the reflection-based codec on
// the hot path of every command; types without a case fall back to bson.Marshal.

// decodeDoc converts a validated BSON document to a bson.D.
func decodeDoc(doc bsoncore.Document) (bson.D, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	out := make(bson.D, len(elems))
	for i, e := range elems {
		v, err := decodeValue(e.Value())
		if err != nil {
			return nil, err
		}
		out[i] = bson.E{Key: e.Key(), Value: v}
	}
	return out, nil
}

func decodeValue(v bsoncore.Value) (any, error) {
	switch v.Type {
	case bsoncore.TypeDouble:
		return v.Double(), nil
	case bsoncore.TypeString:
		return v.StringValue(), nil
	case bsoncore.TypeEmbeddedDocument:
		return decodeDoc(v.Document())
	case bsoncore.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return nil, err
		}
		out := make(bson.A, len(vals))
		for i, x := range vals {
			if out[i], err = decodeValue(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case bsoncore.TypeBinary:
		st, data := v.Binary()
		return bson.Binary{Subtype: st, Data: append([]byte(nil), data...)}, nil
	case bsoncore.TypeUndefined:
		return bson.Undefined{}, nil
	case bsoncore.TypeObjectID:
		return bson.ObjectID(v.ObjectID()), nil
	case bsoncore.TypeBoolean:
		return v.Boolean(), nil
	case bsoncore.TypeDateTime:
		return bson.DateTime(v.DateTime()), nil
	case bsoncore.TypeNull:
		return nil, nil
	case bsoncore.TypeRegex:
		p, o := v.Regex()
		return bson.Regex{Pattern: p, Options: o}, nil
	case bsoncore.TypeDBPointer:
		ns, oid := v.DBPointer()
		return bson.DBPointer{DB: ns, Pointer: bson.ObjectID(oid)}, nil
	case bsoncore.TypeJavaScript:
		return bson.JavaScript(v.JavaScript()), nil
	case bsoncore.TypeSymbol:
		return bson.Symbol(v.Symbol()), nil
	case bsoncore.TypeCodeWithScope:
		code, scope := v.CodeWithScope()
		sd, err := decodeDoc(scope)
		if err != nil {
			return nil, err
		}
		return bson.CodeWithScope{Code: bson.JavaScript(code), Scope: sd}, nil
	case bsoncore.TypeInt32:
		return v.Int32(), nil
	case bsoncore.TypeTimestamp:
		t, i := v.Timestamp()
		return bson.Timestamp{T: t, I: i}, nil
	case bsoncore.TypeInt64:
		return v.Int64(), nil
	case bsoncore.TypeDecimal128:
		h, l := v.Decimal128()
		return bson.NewDecimal128(h, l), nil
	case bsoncore.TypeMinKey:
		return bson.MinKey{}, nil
	case bsoncore.TypeMaxKey:
		return bson.MaxKey{}, nil
	}
	return nil, fmt.Errorf("unsupported BSON type %v", v.Type)
}

// encodeDoc appends d as a BSON document to dst.
func encodeDoc(dst []byte, d bson.D) ([]byte, error) {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	var err error
	for _, e := range d {
		if dst, err = appendElem(dst, e.Key, e.Value); err != nil {
			return nil, err
		}
	}
	return bsoncore.AppendDocumentEnd(dst, idx)
}

func appendElem(dst []byte, key string, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return bsoncore.AppendNullElement(dst, key), nil
	case float64:
		return bsoncore.AppendDoubleElement(dst, key, x), nil
	case string:
		return bsoncore.AppendStringElement(dst, key, x), nil
	case bson.D:
		idx, dst := bsoncore.AppendDocumentElementStart(dst, key)
		var err error
		for _, e := range x {
			if dst, err = appendElem(dst, e.Key, e.Value); err != nil {
				return nil, err
			}
		}
		return bsoncore.AppendDocumentEnd(dst, idx)
	case bson.A:
		idx, dst := bsoncore.AppendArrayElementStart(dst, key)
		var err error
		for i, e := range x {
			if dst, err = appendElem(dst, strconv.Itoa(i), e); err != nil {
				return nil, err
			}
		}
		return bsoncore.AppendArrayEnd(dst, idx)
	case bson.Binary:
		return bsoncore.AppendBinaryElement(dst, key, x.Subtype, x.Data), nil
	case bson.Undefined:
		return bsoncore.AppendUndefinedElement(dst, key), nil
	case bson.ObjectID:
		return bsoncore.AppendObjectIDElement(dst, key, x), nil
	case bool:
		return bsoncore.AppendBooleanElement(dst, key, x), nil
	case bson.DateTime:
		return bsoncore.AppendDateTimeElement(dst, key, int64(x)), nil
	case bson.Regex:
		return bsoncore.AppendRegexElement(dst, key, x.Pattern, x.Options), nil
	case bson.JavaScript:
		return bsoncore.AppendJavaScriptElement(dst, key, string(x)), nil
	case bson.Symbol:
		return bsoncore.AppendSymbolElement(dst, key, string(x)), nil
	case int32:
		return bsoncore.AppendInt32Element(dst, key, x), nil
	case bson.Timestamp:
		return bsoncore.AppendTimestampElement(dst, key, x.T, x.I), nil
	case int64:
		return bsoncore.AppendInt64Element(dst, key, x), nil
	case bson.Decimal128:
		h, l := x.GetBytes()
		return bsoncore.AppendDecimal128Element(dst, key, h, l), nil
	case bson.MinKey:
		return bsoncore.AppendMinKeyElement(dst, key), nil
	case bson.MaxKey:
		return bsoncore.AppendMaxKeyElement(dst, key), nil
	}
	raw, err := bson.Marshal(bson.D{{Key: key, Value: v}})
	if err != nil {
		return nil, err
	}
	// raw is {key: v}; copy its single element
	return append(dst, raw[4:len(raw)-1]...), nil
}

// docSize returns the encoded size of d in bytes.
func docSize(d bson.D) int {
	n := 5
	for _, e := range d {
		n += 2 + len(e.Key) + valueSize(e.Value)
	}
	return n
}

func valueSize(v any) int {
	switch x := v.(type) {
	case nil, bson.Undefined, bson.MinKey, bson.MaxKey:
		return 0
	case bool:
		return 1
	case int32:
		return 4
	case float64, int64, bson.DateTime, bson.Timestamp:
		return 8
	case bson.ObjectID:
		return 12
	case bson.Decimal128:
		return 16
	case string:
		return 5 + len(x)
	case bson.Symbol:
		return 5 + len(x)
	case bson.JavaScript:
		return 5 + len(x)
	case bson.D:
		return docSize(x)
	case bson.A:
		n := 5
		for i, e := range x {
			n += 2 + len(strconv.Itoa(i)) + valueSize(e)
		}
		return n
	case bson.Binary:
		return 5 + len(x.Data)
	case bson.Regex:
		return 2 + len(x.Pattern) + len(x.Options)
	}
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return 0
	}
	return len(raw) - 8
}
