package snapshotapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A position is a point in the changes of one generation of a view: its live collection and
// a MongoDB cluster time, with how many changes of that collection at exactly that cluster
// time it covers (the writes of one transaction share one):
//
//	everything of collection C with clusterTime < T, and the first N changes at T
//
// Every replica of the projector reads the same oplog, so a position is valid on any of
// them; a change stream started at T (startAtOperationTime) that skips the first N changes
// at T goes on exactly after it. N = all covers every change at T: the position a snapshot
// read at T reflects. A position taken while a snapshot is sent also names the last key
// sent and the filters of that snapshot, so that the snapshot can go on from there (at
// the same cluster time).
//
// On the wire a position is sealed like a cursor (AES-256-GCM with a key derived from
// Config.CursorKey, so every replica opens it), base64url:
//
//	base64url( version(1) | nonce(12) | seal( kind(1) | T(4) | I(4) | N(4) | uvarint len | database | uvarint len | collection [ | binding(16) | uvarint len | key ] ) )
//
// A position that does not open is a 400 bad_position; nothing in it is trusted before it
// opened.
const (
	positionVersion = 1
	// maxPositionLen bounds the text of a position before it is decoded.
	maxPositionLen = 4096
	// allAtTS is N covering every change at the cluster time.
	allAtTS = math.MaxUint32

	posStream   = 0 // a point in the changes
	posSnapshot = 1 // within a snapshot read at T, after a key
	posSwitch   = 2 // within the move from generation prev to coll at T, after a key
)

// PositionHeader is the response header of a list that carries the position it reflects.
const PositionHeader = "Jetbus-Position"

var positionDomain = []byte("jetbus position encryption")

// streamPos is a decoded position.
type streamPos struct {
	db, coll string
	ts       bson.Timestamp
	n        uint32
	// snapshot: a snapshot at ts, of the query bound to binding, sent up to key after.
	snapshot bool
	binding  [16]byte
	after    string
	// prev, when set, makes it a position within a generation switch (switch.go): from
	// collection prev to coll at ts, for the query bound to binding, sent up to key after.
	prev string
}

// allAt is the position covering every change of db.coll up to and including ts.
func allAt(db, coll string, ts bson.Timestamp) streamPos {
	return streamPos{db: db, coll: coll, ts: ts, n: allAtTS}
}

// less orders stream positions of one collection.
func (p streamPos) less(q streamPos) bool {
	if p.ts != q.ts {
		return tsBefore(p.ts, q.ts)
	}
	return p.n < q.n
}

// start is where a change stream resumes from p: startAtOperationTime, and the changes to
// skip at that time.
func (p streamPos) start() (bson.Timestamp, uint32) {
	if p.n == allAtTS {
		return nextTS(p.ts), 0
	}
	return p.ts, p.n
}

func tsBefore(a, b bson.Timestamp) bool { return a.T < b.T || (a.T == b.T && a.I < b.I) }

// nextTS is the cluster time right after ts.
func nextTS(ts bson.Timestamp) bson.Timestamp {
	if ts.I == math.MaxUint32 {
		return bson.Timestamp{T: ts.T + 1}
	}
	return bson.Timestamp{T: ts.T, I: ts.I + 1}
}

type positionCodec struct{ aead cipher.AEAD }

func newPositionCodec(key []byte) positionCodec {
	m := hmac.New(sha256.New, key)
	m.Write(positionDomain)
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil { // a 32-byte key always makes a cipher
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return positionCodec{aead: aead}
}

func (c positionCodec) encode(p streamPos) string {
	plain := make([]byte, 0, 13+2*binary.MaxVarintLen64+len(p.db)+len(p.coll)+16+binary.MaxVarintLen64+len(p.after))
	kind := byte(posStream)
	switch {
	case p.snapshot:
		kind = posSnapshot
	case p.prev != "":
		kind = posSwitch
	}
	plain = append(plain, kind)
	plain = binary.BigEndian.AppendUint32(plain, p.ts.T)
	plain = binary.BigEndian.AppendUint32(plain, p.ts.I)
	plain = binary.BigEndian.AppendUint32(plain, p.n)
	plain = binary.AppendUvarint(plain, uint64(len(p.db)))
	plain = append(plain, p.db...)
	plain = binary.AppendUvarint(plain, uint64(len(p.coll)))
	plain = append(plain, p.coll...)
	if kind != posStream {
		plain = append(plain, p.binding[:]...)
		plain = binary.AppendUvarint(plain, uint64(len(p.after)))
		plain = append(plain, p.after...)
	}
	if kind == posSwitch {
		plain = binary.AppendUvarint(plain, uint64(len(p.prev)))
		plain = append(plain, p.prev...)
	}
	ns := c.aead.NonceSize()
	b := make([]byte, 1+ns, 1+ns+len(plain)+c.aead.Overhead())
	b[0] = positionVersion
	_, _ = rand.Read(b[1 : 1+ns])
	b = c.aead.Seal(b, b[1:1+ns], plain, b[:1])
	return base64.RawURLEncoding.EncodeToString(b)
}

func badPosition(param, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, CodeBadPosition, format, args...).with("param", param)
}

// decode opens a position; param names where it came from (since or Last-Event-ID).
func (c positionCodec) decode(s, param string) (streamPos, *apiError) {
	if len(s) > maxPositionLen {
		return streamPos{}, badPosition(param, "the position is not one this API issued (too long)")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	ns := c.aead.NonceSize()
	if err != nil || len(b) < 1+ns+c.aead.Overhead() {
		return streamPos{}, badPosition(param, "the position is not one this API issued")
	}
	if b[0] != positionVersion {
		return streamPos{}, badPosition(param, "the position is from another version of this API: start again without it")
	}
	body, err := c.aead.Open(nil, b[1:1+ns], b[1+ns:], b[:1])
	if err != nil || len(body) < 13 {
		return streamPos{}, badPosition(param, "the position is not one this API issued, or was altered")
	}
	var p streamPos
	kind := body[0]
	p.ts = bson.Timestamp{T: binary.BigEndian.Uint32(body[1:]), I: binary.BigEndian.Uint32(body[5:])}
	p.n = binary.BigEndian.Uint32(body[9:])
	rest := body[13:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return "", false
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, true
	}
	var ok1, ok2 bool
	p.db, ok1 = str()
	p.coll, ok2 = str()
	if !ok1 || !ok2 {
		return streamPos{}, badPosition(param, "the position is malformed")
	}
	switch kind {
	case posStream:
	case posSnapshot, posSwitch:
		if len(rest) < 16 {
			return streamPos{}, badPosition(param, "the position is malformed")
		}
		p.snapshot = kind == posSnapshot
		p.binding = [16]byte(rest[:16])
		rest = rest[16:]
		var ok bool
		if p.after, ok = str(); !ok {
			return streamPos{}, badPosition(param, "the position is malformed")
		}
		if kind == posSwitch {
			if p.prev, ok = str(); !ok || p.prev == "" {
				return streamPos{}, badPosition(param, "the position is malformed")
			}
		}
	default:
		return streamPos{}, badPosition(param, "the position is malformed")
	}
	if len(rest) != 0 {
		return streamPos{}, badPosition(param, "the position is malformed")
	}
	return p, nil
}
