package snapshotapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// Entity tags. A key's tag is "<_v>-<view tag>[-gz]": the version, and a tag of everything
// else the representation depends on (the view's name, its fields, ?meta, the rendering
// of this API, and the generation the view reads: its live collection), so a configuration
// change, a new rendering or a rebuild's switch changes every tag without hashing a body — a
// rebuild may change a document at the same version (merge to replace, a fixed upcaster). A gzip-coded body is another representation, so its tag differs ("-gz",
// as RFC 9110 8.8.3.3 asks of strong validators). A list's tag hashes the page's (_id, _v)
// pairs, its next cursor and the same view tag.

// renderVersion changes whenever the JSON rendering of documents changes.
const renderVersion = "1"

// viewTag returns the 8 hex digits that stand for a view's representation with and without
// meta.
func viewTag(v View) [2]string {
	var out [2]string
	for i, meta := range []bool{false, true} {
		h := sha256.New()
		h.Write([]byte(renderVersion + "\x00" + v.Name + "\x00" + strings.Join(v.Fields, ",") + "\x00" + strconv.FormatBool(meta)))
		out[i] = hex.EncodeToString(h.Sum(nil)[:4])
	}
	return out
}

// generationTags returns the view's tags for the live collection coll: cached for the last
// collection seen, which changes only when a rebuild switches the view.
func (v *view) generationTags(coll string) [2]string {
	if g := v.genTags.Load(); g != nil && g.collection == coll {
		return g.tags
	}
	g := &genTags{collection: coll}
	for i, t := range v.tags {
		h := sha256.Sum256([]byte(t + "\x00" + coll))
		g.tags[i] = hex.EncodeToString(h[:4])
	}
	v.genTags.Store(g)
	return g.tags
}

// genTags are a view's tags for one live collection.
type genTags struct {
	collection string
	tags       [2]string
}

func keyETag(version int64, tag string, gz bool) string {
	b := make([]byte, 0, 40)
	b = append(b, '"')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, '-')
	b = append(b, tag...)
	if gz {
		b = append(b, "-gz"...)
	}
	b = append(b, '"')
	return string(b)
}

func listETag(tag string, ids []string, versions []int64, next string, gz bool) string {
	h := sha256.New()
	h.Write([]byte(tag))
	var n [8]byte
	for i, id := range ids {
		binary.BigEndian.PutUint64(n[:], uint64(len(id)))
		h.Write(n[:])
		h.Write([]byte(id))
		binary.BigEndian.PutUint64(n[:], uint64(versions[i]))
		h.Write(n[:])
	}
	h.Write([]byte{0})
	h.Write([]byte(next))
	s := `"l-` + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
	if gz {
		s += "-gz"
	}
	return s + `"`
}
