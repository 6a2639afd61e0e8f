package minimongo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Wire protocol opcodes.
const (
	opReply      = 1
	opQuery      = 2004
	opCompressed = 2012
	opMsg        = 2013
)

// OP_MSG flag bits.
const (
	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1
	flagExhaustAllowed  = 1 << 16
)

const maxMessageSize = 48000000

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type message struct {
	requestID int32
	opCode    int32
	flags     uint32
	body      bson.Raw // command document with document sequences merged in
	legacy    bool     // received as OP_QUERY
	fullColl  string   // OP_QUERY namespace
}

// readMessage reads one wire message from r.
func readMessage(r io.Reader) (*message, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	length := int32(binary.LittleEndian.Uint32(hdr[0:]))
	if length < 16 || length > maxMessageSize {
		return nil, fmt.Errorf("invalid message length %d", length)
	}
	buf := make([]byte, length-16)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	m := &message{
		requestID: int32(binary.LittleEndian.Uint32(hdr[4:])),
		opCode:    int32(binary.LittleEndian.Uint32(hdr[12:])),
	}
	switch m.opCode {
	case opMsg:
		return m, parseOpMsg(m, hdr[:], buf)
	case opQuery:
		m.legacy = true
		return m, parseOpQuery(m, buf)
	case opCompressed:
		return nil, errors.New("compression was not negotiated")
	}
	return nil, fmt.Errorf("unsupported opcode %d", m.opCode)
}

func parseOpMsg(m *message, hdr, buf []byte) error {
	if len(buf) < 4 {
		return errors.New("short OP_MSG")
	}
	m.flags = binary.LittleEndian.Uint32(buf)
	if m.flags&flagChecksumPresent != 0 {
		if len(buf) < 8 {
			return errors.New("short OP_MSG checksum")
		}
		want := binary.LittleEndian.Uint32(buf[len(buf)-4:])
		h := crc32.New(castagnoli)
		h.Write(hdr)
		h.Write(buf[:len(buf)-4])
		if h.Sum32() != want {
			return errors.New("OP_MSG checksum mismatch")
		}
		buf = buf[:len(buf)-4]
	}
	// Bits 0-15 are required: unknown ones are an error; 16-31 are optional.
	if m.flags&0xffff&^uint32(flagChecksumPresent|flagMoreToCome) != 0 {
		return fmt.Errorf("unsupported OP_MSG flags %#x", m.flags)
	}
	rest := buf[4:]
	var body bsoncore.Document
	type seq struct {
		id   string
		docs []bsoncore.Document
	}
	var seqs []seq
	for len(rest) > 0 {
		kind := rest[0]
		rest = rest[1:]
		switch kind {
		case 0:
			doc, r, ok := bsoncore.ReadDocument(rest)
			if !ok {
				return errors.New("malformed OP_MSG body")
			}
			body, rest = doc, r
		case 1:
			if len(rest) < 4 {
				return errors.New("malformed document sequence")
			}
			size := int(binary.LittleEndian.Uint32(rest))
			if size < 4 || size > len(rest) {
				return errors.New("malformed document sequence size")
			}
			sec := rest[4:size]
			rest = rest[size:]
			id, r, ok := readCString(sec)
			if !ok {
				return errors.New("malformed document sequence identifier")
			}
			s := seq{id: id}
			for len(r) > 0 {
				doc, r2, ok := bsoncore.ReadDocument(r)
				if !ok {
					return errors.New("malformed document in sequence")
				}
				s.docs = append(s.docs, doc)
				r = r2
			}
			seqs = append(seqs, s)
		default:
			return fmt.Errorf("unknown OP_MSG section kind %d", kind)
		}
	}
	if body == nil {
		return errors.New("OP_MSG without body")
	}
	if len(seqs) == 0 {
		m.body = bson.Raw(body)
		return nil
	}
	idx, out := bsoncore.AppendDocumentStart(nil)
	elems, err := body.Elements()
	if err != nil {
		return err
	}
	for _, e := range elems {
		out = append(out, e...)
	}
	for _, s := range seqs {
		aidx, o := bsoncore.AppendArrayElementStart(out, s.id)
		for i, d := range s.docs {
			o = bsoncore.AppendDocumentElement(o, fmt.Sprint(i), d)
		}
		out, _ = bsoncore.AppendArrayEnd(o, aidx)
	}
	out, _ = bsoncore.AppendDocumentEnd(out, idx)
	m.body = bson.Raw(out)
	return nil
}

func parseOpQuery(m *message, buf []byte) error {
	if len(buf) < 4 {
		return errors.New("short OP_QUERY")
	}
	rest := buf[4:]
	coll, rest, ok := readCString(rest)
	if !ok || len(rest) < 8 {
		return errors.New("malformed OP_QUERY")
	}
	m.fullColl = coll
	rest = rest[8:]
	doc, _, ok := bsoncore.ReadDocument(rest)
	if !ok {
		return errors.New("malformed OP_QUERY document")
	}
	if q, err := doc.LookupErr("$query"); err == nil {
		if d, ok := q.DocumentOK(); ok {
			doc = d
		}
	}
	m.body = bson.Raw(doc)
	return nil
}

// encodeReply builds the wire message answering req with the document doc.
func encodeReply(requestID int32, req *message, doc []byte) []byte {
	var out []byte
	if req.legacy {
		out = make([]byte, 16, 16+20+len(doc))
		out = binary.LittleEndian.AppendUint32(out, 0) // responseFlags
		out = binary.LittleEndian.AppendUint64(out, 0) // cursorID
		out = binary.LittleEndian.AppendUint32(out, 0) // startingFrom
		out = binary.LittleEndian.AppendUint32(out, 1) // numberReturned
		out = append(out, doc...)
		binary.LittleEndian.PutUint32(out[12:], opReply)
	} else {
		out = make([]byte, 16, 16+5+len(doc))
		out = binary.LittleEndian.AppendUint32(out, 0)
		out = append(out, 0)
		out = append(out, doc...)
		binary.LittleEndian.PutUint32(out[12:], opMsg)
	}
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	binary.LittleEndian.PutUint32(out[4:], uint32(requestID))
	binary.LittleEndian.PutUint32(out[8:], uint32(req.requestID))
	return out
}

func readCString(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", b, false
}
