package changefeed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
)

// Headers a feed adds to every event it publishes.
const (
	// HeaderOp is the change's operation: insert, update, replace, delete, or read (a
	// document published by a copy).
	HeaderOp = "x-cdc-op"
	// HeaderNamespace is the change's namespace, "<database>.<collection>".
	HeaderNamespace = "x-cdc-ns"
)

// opRead is the operation of a document published by a copy.
const opRead = "read"

// change is the part of a change event (or a copied document) a feed reads.
type change struct {
	token       bson.Raw // the event's _id: its resume token (nil for a copied document)
	op          string
	db, coll    string
	id          bson.RawValue // documentKey._id
	clusterTime bson.Timestamp
	wall        time.Time
	fullDoc     bson.RawValue
	hasFullDoc  bool
	before      bson.RawValue
	updDesc     bson.RawValue
	txnNumber   bson.RawValue
	lsid        bson.RawValue
}

// decodeChange reads a change event.
func decodeChange(raw bson.Raw) (*change, error) {
	c := &change{}
	err := eachElem(raw, func(key []byte, v bson.RawValue) error {
		switch string(key) {
		case "_id":
			c.token, _ = v.DocumentOK()
		case "operationType":
			c.op, _ = v.StringValueOK()
		case "ns":
			if d, ok := v.DocumentOK(); ok {
				c.db, _ = d.Lookup("db").StringValueOK()
				c.coll, _ = d.Lookup("coll").StringValueOK()
			}
		case "documentKey":
			if d, ok := v.DocumentOK(); ok {
				c.id = d.Lookup("_id")
			}
		case "clusterTime":
			t, i, _ := v.TimestampOK()
			c.clusterTime = bson.Timestamp{T: t, I: i}
		case "wallTime":
			if ms, ok := v.DateTimeOK(); ok {
				c.wall = time.UnixMilli(ms)
			}
		case "fullDocument":
			c.fullDoc, c.hasFullDoc = v, true
		case "fullDocumentBeforeChange":
			c.before = v
		case "updateDescription":
			c.updDesc = v
		case "txnNumber":
			c.txnNumber = v
		case "lsid":
			c.lsid = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("changefeed: malformed change event: %w", err)
	}
	if c.token == nil {
		return nil, fmt.Errorf("changefeed: change event without a resume token (_id)")
	}
	if c.wall.IsZero() {
		c.wall = time.Unix(int64(c.clusterTime.T), 0)
	}
	return c, nil
}

// isDocumentChange reports whether c changes one document (the ops a feed publishes).
func (c *change) isDocumentChange() bool {
	switch c.op {
	case "insert", "update", "replace", "delete":
		return true
	}
	return false
}

// ns returns "db.coll".
func (c *change) ns() string { return c.db + "." + c.coll }

// tokenID derives an event ID from a change's resume token: the same change, read again
// after a crash, gets the same ID, which JetStream then drops as a duplicate.
func tokenID(feed string, tok bson.Raw) string {
	data, ok := tok.Lookup("_data").StringValueOK()
	sum := sha256.Sum256(tok)
	if ok {
		sum = sha256.Sum256([]byte(data))
	}
	return feed + ":" + hex.EncodeToString(sum[:16])
}

// copyID derives the event ID of a copied document from the copy's epoch and the document's
// namespace and key: a resumed copy re-publishes the same IDs.
func copyID(feed, epoch, ns, key string) string {
	h := sha256.New()
	h.Write([]byte(ns))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return feed + ":copy:" + epoch + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// debeziumOp maps MongoDB's operation to Debezium's op code.
func debeziumOp(op string) string {
	switch op {
	case "insert":
		return "c"
	case "update", "replace":
		return "u"
	case "delete":
		return "d"
	case opRead:
		return "r"
	}
	return op
}

// envelope renders c in FormatEnvelope (see the package doc): after is the document after
// the change (nil: null), before the pre-image when MongoDB recorded one.
func envelope(dst []byte, feed string, c *change, key string, after bson.RawValue, now time.Time) ([]byte, error) {
	var err error
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, debeziumOp(c.op))
	dst = append(dst, `,"operationType":`...)
	dst = appendString(dst, c.op)
	dst = append(dst, `,"key":`...)
	dst = appendString(dst, key)
	dst = append(dst, `,"before":`...)
	if dst, err = appendOrNull(dst, c.before); err != nil {
		return dst, err
	}
	dst = append(dst, `,"after":`...)
	if dst, err = appendOrNull(dst, after); err != nil {
		return dst, err
	}
	dst = append(dst, `,"updateDescription":`...)
	if dst, err = appendOrNull(dst, c.updDesc); err != nil {
		return dst, err
	}
	dst = append(dst, `,"source":{"feed":`...)
	dst = appendString(dst, feed)
	dst = append(dst, `,"ns":{"db":`...)
	dst = appendString(dst, c.db)
	dst = append(dst, `,"coll":`...)
	dst = appendString(dst, c.coll)
	dst = append(dst, `},"clusterTime":`...)
	if c.clusterTime.T == 0 && c.clusterTime.I == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"t":`...)
		dst = strconv.AppendUint(dst, uint64(c.clusterTime.T), 10)
		dst = append(dst, `,"i":`...)
		dst = strconv.AppendUint(dst, uint64(c.clusterTime.I), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"ts_ms":`...)
	dst = strconv.AppendInt(dst, c.wall.UnixMilli(), 10)
	dst = append(dst, `,"txnNumber":`...)
	if dst, err = appendOrNull(dst, c.txnNumber); err != nil {
		return dst, err
	}
	dst = append(dst, `,"lsid":`...)
	if dst, err = appendOrNull(dst, c.lsid); err != nil {
		return dst, err
	}
	dst = append(dst, `,"snapshot":`...)
	dst = strconv.AppendBool(dst, c.op == opRead)
	dst = append(dst, `},"ts_ms":`...)
	dst = strconv.AppendInt(dst, now.UnixMilli(), 10)
	return append(dst, '}'), nil
}

func appendOrNull(dst []byte, v bson.RawValue) ([]byte, error) {
	if v.Type == 0 {
		return append(dst, "null"...), nil
	}
	return appendJSON(dst, v)
}

// headersOf returns the headers of c's event; a namespace that cannot travel in a header
// (a control character in a collection name) is left out. The maps are shared by every event
// of one operation and namespace (the Bus copies them), so they must not be changed.
func (h *headerCache) headersOf(c *change) map[string]string {
	k := headerKey{c.op, c.db, c.coll}
	if m, ok := h.m[k]; ok {
		return m
	}
	m := map[string]string{HeaderOp: c.op}
	if ns := c.ns(); jetbus.ValidateHeaderValue(HeaderNamespace, ns) == nil {
		m[HeaderNamespace] = ns
	}
	if h.m == nil || len(h.m) > 4096 {
		h.m = map[headerKey]map[string]string{}
	}
	h.m[k] = m
	return m
}

// headerCache holds the header maps of a feed's events; one goroutine (the reader) uses it.
type headerCache struct {
	m map[headerKey]map[string]string
}

type headerKey struct{ op, db, coll string }

// summary is what a dead letter holds instead of a change too large to publish: where it
// came from, its key and its size.
func summary(c *change, key string, size int) []byte {
	b := []byte(`{"feed_summary":true,"operationType":`)
	b = appendString(b, c.op)
	b = append(b, `,"ns":`...)
	b = appendString(b, c.ns())
	b = append(b, `,"key":`...)
	b = appendString(b, key)
	b = append(b, `,"clusterTime":{"t":`...)
	b = strconv.AppendUint(b, uint64(c.clusterTime.T), 10)
	b = append(b, `,"i":`...)
	b = strconv.AppendUint(b, uint64(c.clusterTime.I), 10)
	b = append(b, `},"size":`...)
	b = strconv.AppendInt(b, int64(size), 10)
	return append(b, '}')
}
