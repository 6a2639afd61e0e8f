package projection

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus"
)

// Limits MongoDB sets on documents.
const (
	// MaxDocumentSize is MongoDB's largest document (16 MiB).
	MaxDocumentSize = 16 * 1024 * 1024
	// MaxDepth is MongoDB's deepest nesting of documents and arrays.
	MaxDepth = 100
)

// pointer is a parsed JSON pointer (RFC 6901).
type pointer []string

func parsePointer(s string) (pointer, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("%q is not a JSON pointer: it must start with /", s)
	}
	toks := strings.Split(s[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("%q is not a JSON pointer: ~ must be followed by 0 or 1", s)
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func (p pointer) String() string {
	var b strings.Builder
	for _, t := range p {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// lookup returns the value at p in v.
func (p pointer) lookup(v gjson.Result) (gjson.Result, bool) {
	for _, tok := range p {
		var next gjson.Result
		found := false
		switch {
		case v.IsObject():
			v.ForEach(func(k, val gjson.Result) bool {
				if k.Str == tok {
					next, found = val, true
					return false
				}
				return true
			})
		case v.IsArray():
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || (len(tok) > 1 && tok[0] == '0') {
				return gjson.Result{}, false
			}
			n := 0
			v.ForEach(func(_, val gjson.Result) bool {
				if n == i {
					next, found = val, true
					return false
				}
				n++
				return true
			})
		}
		if !found {
			return gjson.Result{}, false
		}
		v = next
	}
	return v, true
}

// kind is what an event does to its key's document.
type kind uint8

const (
	kindWrite     kind = iota // replace or merge the payload
	kindTombstone             // delete, or keep marked _deleted
)

// change is an event decoded for a changelog view.
type change struct {
	kind  kind
	key   string
	topic string
	ver   int64
	ts    int64 // Unix ms
	// doc is, in replace mode, the whole view document (_id, _v, _ts, _topic, then the
	// payload's fields); in merge mode the fields to set.
	doc bsoncore.Document
	// unset lists, in merge mode, the payload's null fields.
	unset []string
	// models are the writes of a projection WithWriteModels (which decodes nothing else but
	// the version).
	models []mongo.WriteModel
}

// decoder turns deliveries into changes for one projection's settings.
type decoder struct {
	mode    Mode
	version pointer // nil: the stream sequence
}

var reservedFields = map[string]bool{fieldID: true, fieldVersion: true, fieldTS: true, fieldTopic: true, fieldDeleted: true, fieldExpires: true}

// decode checks d and turns it into a change. Its errors are *DataError: the event can never
// be applied as it is.
func (dc *decoder) decode(d *jetbus.Delivery) (change, error) {
	c := change{key: d.Key, topic: d.Topic, ts: d.TS.UnixMilli()}
	if d.Key == "" {
		return c, dataErrorf("event %s has no key: a changelog view keeps one document per key", d.ID)
	}
	if !utf8.ValidString(d.Key) {
		return c, dataErrorf("event %s: key is not valid UTF-8", d.ID)
	}
	payload := gjson.ParseBytes(d.Payload)
	if d.Tombstone() {
		c.kind = kindTombstone
		v, err := dc.tombstoneVersion(d)
		c.ver = v
		return c, err
	}
	if !payload.IsObject() {
		return c, dataErrorf("event %s: the payload is %s, not a JSON object: a %s projection stores an object's fields", d.ID, jsonKind(payload), dc.mode)
	}
	if dc.version == nil {
		c.ver = seqVersion(d.Seq)
	} else {
		at, ok := dc.version.lookup(payload)
		if !ok {
			return c, dataErrorf("event %s: the payload has no version at %s", d.ID, dc.version)
		}
		v, err := integer(at)
		if err != nil {
			return c, dataErrorf("event %s: the version at %s %v", d.ID, dc.version, err)
		}
		c.ver = v
	}
	var err error
	if dc.mode == Merge {
		c.doc, c.unset, err = mergeFields(payload)
	} else {
		c.doc, err = replaceDocument(c.key, c.ver, c.ts, d.Topic, payload)
	}
	if err != nil {
		return c, dataErrorf("event %s: %v", d.ID, err)
	}
	if len(c.doc) > MaxDocumentSize {
		return c, &DataError{Code: 10334, Msg: fmt.Sprintf("event %s: the document is %d bytes; MongoDB's limit is %d", d.ID, len(c.doc), MaxDocumentSize)}
	}
	return c, nil
}

func seqVersion(seq uint64) int64 {
	if seq > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(seq)
}

func (dc *decoder) tombstoneVersion(d *jetbus.Delivery) (int64, error) {
	if dc.version == nil {
		return seqVersion(d.Seq), nil
	}
	h := d.Header(VersionHeader)
	if h == "" {
		return 0, dataErrorf("event %s: a tombstone in a projection versioned by %s needs its version in the %s header; without it an older event could bring the key back", d.ID, dc.version, VersionHeader)
	}
	v, err := parseVersion(h)
	if err != nil {
		return 0, dataErrorf("event %s: header %s %q %v", d.ID, VersionHeader, h, err)
	}
	return v, nil
}

// versionRange says what a version may be.
const versionRange = "a version is an integer from 0 to 9223372036854775807"

// parseVersion reads a version written in decimal: an integer from 0 to math.MaxInt64.
func parseVersion(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil && v >= 0:
		return v, nil
	case err == nil:
		return 0, fmt.Errorf("is negative: %s", versionRange)
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("is above the largest version: %s", versionRange)
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("is negative: %s", versionRange)
	}
	return 0, fmt.Errorf("is not an integer: %s", versionRange)
}

func jsonKind(r gjson.Result) string {
	switch r.Type {
	case gjson.Null:
		return "null"
	case gjson.False, gjson.True:
		return "a boolean"
	case gjson.Number:
		return "a number"
	case gjson.String:
		return "a string"
	}
	if r.IsArray() {
		return "an array"
	}
	return "not JSON"
}

// integer reads a version from JSON: an integer from 0 to math.MaxInt64, written without
// fraction or exponent (7.0 and 7e0 are refused: a producer that writes them writes floats,
// whose large values are not exact).
func integer(r gjson.Result) (int64, error) {
	if r.Type != gjson.Number {
		return 0, fmt.Errorf("is %s, not an integer", jsonKind(r))
	}
	v, err := parseVersion(r.Raw)
	if err != nil {
		return 0, fmt.Errorf("%s %v", r.Raw, err)
	}
	return v, nil
}

// replaceDocument builds the view document of a replace-mode event.
func replaceDocument(key string, ver, ts int64, topic string, payload gjson.Result) (bsoncore.Document, error) {
	idx, dst := bsoncore.AppendDocumentStart(make([]byte, 0, len(payload.Raw)+len(key)+64))
	dst = bsoncore.AppendStringElement(dst, fieldID, key)
	dst = bsoncore.AppendInt64Element(dst, fieldVersion, ver)
	dst = bsoncore.AppendDateTimeElement(dst, fieldTS, ts)
	dst = bsoncore.AppendStringElement(dst, fieldTopic, topic)
	var err error
	dst, err = appendFields(dst, payload, nil)
	if err != nil {
		return nil, err
	}
	return bsoncore.AppendDocumentEnd(dst, idx)
}

// mergeFields returns the fields a merge-mode event sets, and those it removes (null).
func mergeFields(payload gjson.Result) (bsoncore.Document, []string, error) {
	var unset []string
	idx, dst := bsoncore.AppendDocumentStart(make([]byte, 0, len(payload.Raw)+16))
	dst, err := appendFields(dst, payload, &unset)
	if err != nil {
		return nil, nil, err
	}
	doc, err := bsoncore.AppendDocumentEnd(dst, idx)
	return doc, unset, err
}

// appendFields appends the top-level fields of the object payload to dst, refusing reserved
// names. With unset, null fields are listed there instead of appended.
func appendFields(dst []byte, payload gjson.Result, unset *[]string) ([]byte, error) {
	var err error
	seen := newNameSet()
	payload.ForEach(func(k, v gjson.Result) bool {
		name := k.Str
		if err = checkName(name, "", seen); err != nil {
			return false
		}
		if reservedFields[name] {
			err = fmt.Errorf("field %q is reserved for jetbus's metadata (_id, _v, _ts, _topic, _deleted, _expires)", name)
			return false
		}
		if unset != nil && v.Type == gjson.Null {
			*unset = append(*unset, name)
			return true
		}
		dst, err = appendValue(dst, name, name, v, 2)
		return err == nil
	})
	return dst, err
}

// nameSet finds duplicate field names: a scan for small objects, a map for large ones.
type nameSet struct {
	small []string
	big   map[string]struct{}
}

func newNameSet() *nameSet { return &nameSet{} }

func (s *nameSet) add(name string) bool {
	if s.big != nil {
		if _, ok := s.big[name]; ok {
			return false
		}
		s.big[name] = struct{}{}
		return true
	}
	for _, n := range s.small {
		if n == name {
			return false
		}
	}
	s.small = append(s.small, name)
	if len(s.small) > 16 {
		s.big = make(map[string]struct{}, 32)
		for _, n := range s.small {
			s.big[n] = struct{}{}
		}
		s.small = nil
	}
	return true
}

// checkName refuses field names MongoDB cannot store or address: empty, $-prefixed, dotted,
// with a NUL byte or invalid UTF-8, and a name repeated in the same object.
func checkName(name, path string, seen *nameSet) error {
	where := name
	if path != "" {
		where = path + "." + name
	}
	switch {
	case name == "":
		return fmt.Errorf("an empty field name (in %q)", path)
	case name[0] == '$':
		return fmt.Errorf("field %q starts with $: MongoDB reserves $-prefixed names for operators", where)
	case strings.IndexByte(name, '.') >= 0:
		return fmt.Errorf("field %q contains a dot: MongoDB reads dots as paths", where)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("field %q contains a NUL byte", where)
	case !utf8.ValidString(name):
		return fmt.Errorf("field %q is not valid UTF-8", where)
	case !seen.add(name):
		return fmt.Errorf("field %q appears twice", where)
	}
	return nil
}

var errTooDeep = errors.New("the payload nests deeper than MongoDB's 100 levels")

// appendValue appends the JSON value v as the BSON element key. depth is v's nesting level
// when it is a document or an array (the view document is level 1).
func appendValue(dst []byte, key, path string, v gjson.Result, depth int) ([]byte, error) {
	switch v.Type {
	case gjson.Null:
		return bsoncore.AppendNullElement(dst, key), nil
	case gjson.False:
		return bsoncore.AppendBooleanElement(dst, key, false), nil
	case gjson.True:
		return bsoncore.AppendBooleanElement(dst, key, true), nil
	case gjson.String:
		if !utf8.ValidString(v.Str) {
			return nil, fmt.Errorf("field %q: the string is not valid UTF-8", path)
		}
		return bsoncore.AppendStringElement(dst, key, v.Str), nil
	case gjson.Number:
		return appendNumber(dst, key, path, v.Raw)
	}
	if depth > MaxDepth {
		return nil, errTooDeep
	}
	var err error
	if v.IsArray() {
		idx, out := bsoncore.AppendArrayElementStart(dst, key)
		i := 0
		v.ForEach(func(_, el gjson.Result) bool {
			out, err = appendValue(out, strconv.Itoa(i), path+"."+strconv.Itoa(i), el, depth+1)
			i++
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		return bsoncore.AppendArrayEnd(out, idx)
	}
	if !v.IsObject() {
		return nil, fmt.Errorf("field %q is not JSON", path)
	}
	idx, out := bsoncore.AppendDocumentElementStart(dst, key)
	seen := newNameSet()
	v.ForEach(func(k, el gjson.Result) bool {
		if err = checkName(k.Str, path, seen); err != nil {
			return false
		}
		out, err = appendValue(out, k.Str, path+"."+k.Str, el, depth+1)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return bsoncore.AppendDocumentEnd(out, idx)
}

// appendNumber stores a JSON number as a 64-bit integer when it is written as an integer that
// fits, as a double otherwise.
func appendNumber(dst []byte, key, path, raw string) ([]byte, error) {
	if !strings.ContainsAny(raw, ".eE") {
		if i, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return bsoncore.AppendInt64Element(dst, key, i), nil
		}
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("field %q: the number %s does not fit in a double", path, raw)
	}
	return bsoncore.AppendDoubleElement(dst, key, f), nil
}

// tombstoneDocument is the document a tombstone leaves: its metadata and _deleted: true,
// and, when expires is not zero, _expires (Unix ms), after which a TTL index removes it.
// Without deleted it is the empty state a tombstone followed by merges starts from.
func tombstoneDocument(key string, ver, ts int64, topic string, deleted bool, expires int64) bsoncore.Document {
	idx, dst := bsoncore.AppendDocumentStart(make([]byte, 0, len(key)+len(topic)+64))
	dst = bsoncore.AppendStringElement(dst, fieldID, key)
	dst = bsoncore.AppendInt64Element(dst, fieldVersion, ver)
	dst = bsoncore.AppendDateTimeElement(dst, fieldTS, ts)
	dst = bsoncore.AppendStringElement(dst, fieldTopic, topic)
	if deleted {
		dst = bsoncore.AppendBooleanElement(dst, fieldDeleted, true)
	}
	if expires != 0 {
		dst = bsoncore.AppendDateTimeElement(dst, fieldExpires, expires)
	}
	doc, _ := bsoncore.AppendDocumentEnd(dst, idx)
	return doc
}
