package snapshotapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// A cursor is the position after the last document of a page: the value of the order field
// and the _id there, bound to the query that produced it (view, filters, order), sealed with
// AES-256-GCM so that a client can neither alter nor read it (the order field may be one
// that views[].fields hides):
//
//	base64url( version(1) | nonce(12) | seal( binding(16) | type(1) | uvarint len | value | uvarint len | _id ) )
//
// The key is derived from Config.CursorKey (HMAC-SHA256 with a label), the version is the
// additional data. A cursor that does not open, or that another query issued, is refused
// with 400 bad_cursor; nothing in it is trusted before it opened.
const (
	cursorVersion = 2
	// maxCursorLen bounds the text of a cursor before it is decoded.
	maxCursorLen = 2048
)

var cursorDomain = []byte("jetbus cursor encryption")

// keyset is a decoded cursor: the last document's order value and _id.
type keyset struct {
	value bson.RawValue
	id    string
}

type cursorCodec struct{ aead cipher.AEAD }

func newCursorCodec(key []byte) cursorCodec {
	m := hmac.New(sha256.New, key)
	m.Write(cursorDomain)
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil { // a 32-byte key always makes a cipher
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return cursorCodec{aead: aead}
}

func (c cursorCodec) encode(binding [16]byte, ks keyset) string {
	ns := c.aead.NonceSize()
	plain := make([]byte, 0, 16+1+2*binary.MaxVarintLen64+len(ks.value.Value)+len(ks.id))
	plain = append(plain, binding[:]...)
	plain = append(plain, byte(ks.value.Type))
	plain = binary.AppendUvarint(plain, uint64(len(ks.value.Value)))
	plain = append(plain, ks.value.Value...)
	plain = binary.AppendUvarint(plain, uint64(len(ks.id)))
	plain = append(plain, ks.id...)
	b := make([]byte, 1+ns, 1+ns+len(plain)+c.aead.Overhead())
	b[0] = cursorVersion
	_, _ = rand.Read(b[1 : 1+ns])
	b = c.aead.Seal(b, b[1:1+ns], plain, b[:1])
	return base64.RawURLEncoding.EncodeToString(b)
}

func badCursor(format string, args ...any) *apiError {
	return newError(400, CodeBadCursor, format, args...).with("param", "cursor")
}

func (c cursorCodec) decode(s string, binding [16]byte) (keyset, *apiError) {
	if len(s) > maxCursorLen {
		return keyset{}, badCursor("the cursor is not one this API issued (too long)")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	ns := c.aead.NonceSize()
	if err != nil || len(b) < 1+ns+c.aead.Overhead() {
		return keyset{}, badCursor("the cursor is not one this API issued")
	}
	if b[0] != cursorVersion {
		return keyset{}, badCursor("the cursor is from another version of this API: start again without it")
	}
	body, err := c.aead.Open(nil, b[1:1+ns], b[1+ns:], b[:1])
	if err != nil || len(body) < 16+1 {
		return keyset{}, badCursor("the cursor is not one this API issued, or was altered")
	}
	if [16]byte(body[:16]) != binding {
		return keyset{}, badCursor("the cursor belongs to another query: keep the filters and order of the request that returned it")
	}
	rest := body[16:]
	typ := bson.Type(rest[0])
	rest = rest[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return keyset{}, badCursor("the cursor is malformed")
	}
	val := rest[k : k+int(n)]
	rest = rest[k+int(n):]
	n, k = binary.Uvarint(rest)
	if k <= 0 || n != uint64(len(rest)-k) {
		return keyset{}, badCursor("the cursor is malformed")
	}
	id := string(rest[k:])
	rv := bson.RawValue{Type: typ, Value: val}
	if err := rv.Validate(); err != nil {
		return keyset{}, badCursor("the cursor is malformed")
	}
	return keyset{value: rv, id: id}, nil
}

// keysetOf reads the cursor position of a document: its order field and _id.
func keysetOf(doc bson.Raw, o order) (keyset, bool) {
	id, ok := bsoncore.Document(doc).Lookup("_id").StringValueOK()
	if !ok {
		return keyset{}, false
	}
	if o.field == "_id" {
		return keyset{value: bson.RawValue{Type: bson.TypeString, Value: bsoncore.AppendString(nil, id)}, id: id}, true
	}
	v, err := bsoncore.Document(doc).LookupErr(strings.Split(o.field, ".")...)
	if err != nil { // missing: sorts as null
		return keyset{value: bson.RawValue{Type: bson.TypeNull}, id: id}, true
	}
	return keyset{value: bson.RawValue{Type: bson.Type(v.Type), Value: v.Data}, id: id}, true
}

// Sort brackets: MongoDB orders values of different types by bracket, and range operators
// compare only within one, so the documents after a position are those greater within its
// bracket, those equal with a greater _id, and every document in a later bracket.
var brackets = [][]string{
	{"minKey"},
	{"null", "undefined"},
	{"double", "int", "long", "decimal"},
	{"string", "symbol"},
	{"object"},
	{"array"},
	{"binData"},
	{"objectId"},
	{"bool"},
	{"date"},
	{"timestamp"},
	{"regex"},
	{"maxKey"},
}

func bracketOf(t bson.Type) int {
	switch t {
	case bson.TypeMinKey:
		return 0
	case bson.TypeNull, bson.TypeUndefined:
		return 1
	case bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeDecimal128:
		return 2
	case bson.TypeString, bson.TypeSymbol:
		return 3
	case bson.TypeEmbeddedDocument:
		return 4
	case bson.TypeArray:
		return 5
	case bson.TypeBinary:
		return 6
	case bson.TypeObjectID:
		return 7
	case bson.TypeBoolean:
		return 8
	case bson.TypeDateTime:
		return 9
	case bson.TypeTimestamp:
		return 10
	case bson.TypeRegex:
		return 11
	case bson.TypeMaxKey:
		return 12
	}
	return 3 // JavaScript and the rest: MongoDB has no documented place; treat as strings
}

// after returns the filter of the documents after ks in order o.
func (ks keyset) after(o order) bson.D {
	cmp := "$gt"
	if o.desc {
		cmp = "$lt"
	}
	if o.field == "_id" {
		return bson.D{{Key: "_id", Value: bson.D{{Key: cmp, Value: ks.id}}}}
	}
	f := o.field
	b := bracketOf(ks.value.Type)
	var or bson.A
	if b == 1 {
		// null and missing: {f: null} matches both.
		or = append(or, bson.D{{Key: f, Value: nil}, {Key: "_id", Value: bson.D{{Key: cmp, Value: ks.id}}}})
	} else {
		or = append(or,
			bson.D{{Key: f, Value: bson.D{{Key: cmp, Value: ks.value}}}},
			bson.D{{Key: f, Value: bson.D{{Key: "$eq", Value: ks.value}}}, {Key: "_id", Value: bson.D{{Key: cmp, Value: ks.id}}}},
		)
	}
	var types bson.A
	if o.desc {
		for i := b - 1; i >= 0; i-- {
			if i == 1 {
				or = append(or, bson.D{{Key: f, Value: nil}}) // null and missing sort last in desc
				continue
			}
			for _, t := range brackets[i] {
				types = append(types, t)
			}
		}
	} else {
		for i := b + 1; i < len(brackets); i++ {
			for _, t := range brackets[i] {
				types = append(types, t)
			}
		}
	}
	if len(types) > 0 {
		or = append(or, bson.D{{Key: f, Value: bson.D{{Key: "$type", Value: types}}}})
	}
	return bson.D{{Key: "$or", Value: or}}
}
