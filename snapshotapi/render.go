package snapshotapi

import (
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus/internal/jsonenc"
)

// Rendering: view documents go from BSON to JSON without a detour through maps, keeping the
// stored field order. _id comes first; _v and _ts are shown only with ?meta=1; _topic and
// _deleted never. BSON types JSON lacks become: dates RFC 3339 strings in UTC with
// milliseconds, ObjectIds hex strings, binary base64 strings, decimals strings, NaN and
// infinities null, timestamps {"t","i"}, regular expressions "/pattern/options", MinKey,
// MaxKey and undefined null.

// fieldSet selects the fields of a document: nil is every field.
type fieldSet struct {
	top  map[string]bool      // returned whole
	sub  map[string]*fieldSet // dotted paths: parts of an embedded document
	none bool
}

func newFieldSet(fields []string) *fieldSet {
	if len(fields) == 0 {
		return nil
	}
	fs := &fieldSet{top: map[string]bool{}, sub: map[string]*fieldSet{}}
	for _, f := range fields {
		fs.add(f)
	}
	return fs
}

func (fs *fieldSet) add(path string) {
	head, rest, dotted := strings.Cut(path, ".")
	if !dotted {
		fs.top[head] = true
		return
	}
	sub := fs.sub[head]
	if sub == nil {
		sub = &fieldSet{top: map[string]bool{}, sub: map[string]*fieldSet{}}
		fs.sub[head] = sub
	}
	sub.add(rest)
}

// renderOpts say what to render of a view document.
type renderOpts struct {
	fields *fieldSet
	meta   bool
	// id, when set, is written as _id first (history documents hold none).
	id string
}

// appendDoc appends the JSON of a view document.
func appendDoc(b []byte, doc []byte, o renderOpts) []byte {
	b = append(b, '{')
	first := true
	if o.id != "" {
		b = append(b, `"_id":`...)
		b = appendString(b, o.id)
		first = false
	}
	rem, ok := docElements(doc)
	for ok {
		var el bsoncore.Element
		el, rem, ok = bsoncore.ReadElement(rem)
		if !ok {
			break
		}
		key := el.KeyBytes()
		var sub *fieldSet
		switch string(key) {
		case "_id":
			if o.id != "" {
				continue
			}
		case "_v", "_ts":
			if !o.meta {
				continue
			}
		case "_topic", "_deleted":
			continue
		default:
			if o.fields != nil && !o.fields.top[string(key)] {
				if sub = o.fields.sub[string(key)]; sub == nil {
					continue
				}
			}
		}
		val := el.Value()
		if sub != nil && !container(val.Type) {
			continue // a dotted path into a value that is not a document
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendStringBytes(b, key)
		b = append(b, ':')
		b = appendValue(b, val, sub)
	}
	return append(b, '}')
}

func container(t bsoncore.Type) bool {
	return t == bsoncore.TypeEmbeddedDocument || t == bsoncore.TypeArray
}

// docElements returns the elements of a BSON document.
func docElements(doc []byte) ([]byte, bool) {
	if len(doc) < 5 {
		return nil, false
	}
	n, _, ok := bsoncore.ReadLength(doc)
	if !ok || int(n) > len(doc) || n < 5 {
		return nil, false
	}
	return doc[4 : n-1], true
}

func appendValue(b []byte, v bsoncore.Value, sub *fieldSet) []byte {
	switch v.Type {
	case bsoncore.TypeDouble:
		f, _ := v.DoubleOK()
		return appendFloat(b, f)
	case bsoncore.TypeString:
		s, _ := v.StringValueOK()
		return appendString(b, s)
	case bsoncore.TypeSymbol:
		s, _ := v.SymbolOK()
		return appendString(b, s)
	case bsoncore.TypeJavaScript:
		s, _ := v.JavaScriptOK()
		return appendString(b, s)
	case bsoncore.TypeEmbeddedDocument:
		d, _ := v.DocumentOK()
		return appendSubDoc(b, d, sub)
	case bsoncore.TypeArray:
		a, _ := v.ArrayOK()
		b = append(b, '[')
		rem, ok := docElements(a)
		first := true
		for ok {
			var el bsoncore.Element
			el, rem, ok = bsoncore.ReadElement(rem)
			if !ok {
				break
			}
			val := el.Value()
			if sub != nil && !container(val.Type) {
				continue // a dotted path reaches into an array's documents only
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendValue(b, val, sub)
		}
		return append(b, ']')
	case bsoncore.TypeBinary:
		_, data, _ := v.BinaryOK()
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, data)
		return append(b, '"')
	case bsoncore.TypeObjectID:
		oid, _ := v.ObjectIDOK()
		b = append(b, '"')
		b = hex.AppendEncode(b, oid[:])
		return append(b, '"')
	case bsoncore.TypeBoolean:
		if t, _ := v.BooleanOK(); t {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case bsoncore.TypeDateTime:
		ms, _ := v.DateTimeOK()
		return appendTime(b, ms)
	case bsoncore.TypeRegex:
		p, opts, _ := v.RegexOK()
		return appendString(b, "/"+p+"/"+opts)
	case bsoncore.TypeInt32:
		n, _ := v.Int32OK()
		return strconv.AppendInt(b, int64(n), 10)
	case bsoncore.TypeInt64:
		n, _ := v.Int64OK()
		return strconv.AppendInt(b, n, 10)
	case bsoncore.TypeTimestamp:
		t, i, _ := v.TimestampOK()
		b = append(b, `{"t":`...)
		b = strconv.AppendUint(b, uint64(t), 10)
		b = append(b, `,"i":`...)
		b = strconv.AppendUint(b, uint64(i), 10)
		return append(b, '}')
	case bsoncore.TypeDecimal128:
		h, l, _ := v.Decimal128OK()
		return appendString(b, bson.NewDecimal128(h, l).String())
	}
	return append(b, "null"...) // null, undefined, MinKey, MaxKey, DBPointer, code with scope
}

// appendSubDoc appends an embedded document, restricted to sub when not nil.
func appendSubDoc(b []byte, d []byte, sub *fieldSet) []byte {
	b = append(b, '{')
	first := true
	rem, ok := docElements(d)
	for ok {
		var el bsoncore.Element
		el, rem, ok = bsoncore.ReadElement(rem)
		if !ok {
			break
		}
		key := el.KeyBytes()
		var next *fieldSet
		if sub != nil && !sub.top[string(key)] {
			if next = sub.sub[string(key)]; next == nil {
				continue
			}
		}
		val := el.Value()
		if next != nil && !container(val.Type) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendStringBytes(b, key)
		b = append(b, ':')
		b = appendValue(b, val, next)
	}
	return append(b, '}')
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	// As encoding/json: plain notation between 1e-6 and 1e21, exponent notation outside.
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func appendTime(b []byte, ms int64) []byte {
	b = append(b, '"')
	b = time.UnixMilli(ms).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// appendString appends s as a JSON string (jsonenc.AppendString).
func appendString(b []byte, s string) []byte { return jsonenc.AppendString(b, s) }

// appendStringBytes is appendString of a BSON key, read in place: the string does not
// outlive the call.
func appendStringBytes(b []byte, s []byte) []byte {
	return jsonenc.AppendString(b, s)
}
