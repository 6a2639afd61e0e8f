package projection

import (
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus"
)

// WriteModelsFunc is a changelog projection's own write strategy (WithWriteModels): the write
// models that apply delivery d, whose version is version, to the view collection. It replaces
// the built-in replace and merge modes; a returned error dead-letters the event (reason
// "projection"). The models of one event go into one unordered bulk write, so they must not
// depend on each other's order; the models of a key's successive events are written one
// after the other, in stream order. Redelivery and replay call it again for the same event:
// guard the writes with the version (for example a filter on "_v" below version) so that
// applying an event twice, or an older one after a newer one, changes nothing.
type WriteModelsFunc func(d *jetbus.Delivery, version int64) ([]mongo.WriteModel, error)

// WithWriteModels makes a changelog projection write what f returns instead of its Mode's
// documents (the Kafka Connect "write model strategy", in Go). Version, tombstone and history
// settings do not apply; f decides.
func WithWriteModels(f WriteModelsFunc) Option {
	return func(o *settings) error { o.writeModels = f; return nil }
}

// maxStepBytes bounds the update a step sends for one key, well below MongoDB's 16 MiB
// command document, so that a key with many large merge events in one batch is written in
// several steps.
const maxStepBytes = 8 * 1024 * 1024

// step is one write for one key: one or more write models carrying the effect of events (in
// stream order). The steps of a key are written one after the other; the steps of different
// keys together, in one unordered bulk write per round.
type step struct {
	key    string
	events []*entry
	// superseded counts the leading events that the write does not carry: a later event of
	// the key replaces their effect.
	superseded int
	models     []mongo.WriteModel
	bytes      int
}

// planner turns a key's events into steps.
type planner struct {
	mode   Mode
	tomb   Tombstones
	custom bool
	// retention is how long a deleted key's marker stays (delete mode); now is the clock.
	retention time.Duration
	now       func() time.Time
	// step is Config.MaxVersionStep when it bounds the versions (a Version pointer, the
	// built-in modes, a bound below UnboundedVersionStep); 0: no bound.
	step int64
}

// floor is the least stored version over which a write carrying events from first on may
// apply: first's version minus the step, or 0 (no floor: versions are never negative) when
// that is not positive or there is no step. A key's versions may rise by at most the step
// from one event to the next, so the events a write carries apply over a stored version in
// [floor, last's version) — none of them over a lower one, where the first would move the
// version too far (and every later one further).
func (pl *planner) floor(first *entry) int64 {
	if pl.step == 0 {
		return 0
	}
	return max(changeOf(first).ver-pl.step, 0)
}

// tooFar reports whether version ver is more than the step above the stored version cur.
func (pl *planner) tooFar(cur, ver int64) bool {
	return pl.step > 0 && ver-pl.step > 0 && cur < ver-pl.step
}

// marker is the document tombstone c leaves: kept for good, or until the retention passed.
func (pl *planner) marker(c change) bsoncore.Document {
	var expires int64
	if pl.tomb == DeleteTombstones {
		expires = pl.now().Add(pl.retention).UnixMilli()
	}
	return tombstoneDocument(c.key, c.ver, c.ts, c.topic, true, expires)
}

// plan returns the steps that apply evs: one key's events in stream order, each with a
// version greater than the one before it and at most the step above it (chain). Events superseded by a later one (every earlier
// event in replace mode, those before the last tombstone in merge mode) are accounted for by
// the first step without being written.
func (pl *planner) plan(key string, evs []*entry) []*step {
	if pl.custom {
		steps := make([]*step, 0, len(evs))
		for _, e := range evs {
			steps = append(steps, pl.single(e))
		}
		return steps
	}
	last := evs[len(evs)-1]
	if pl.mode == Replace || changeOf(last).kind == kindTombstone {
		s := pl.write(evs[0], last)
		s.events, s.superseded = evs, len(evs)-1
		return []*step{s}
	}
	// Merge: from the last tombstone on (a tombstone that applies resets the key; one that
	// does not means nothing before it applies either).
	t := -1
	for i, e := range evs {
		if changeOf(e).kind == kindTombstone {
			t = i
		}
	}
	var steps []*step
	cur := &step{key: key}
	stages := make([]byte, 0, 256)
	var idx int32
	idx, stages = bsoncore.AppendArrayStart(stages)
	n := 0
	flush := func() {
		arr, _ := bsoncore.AppendArrayEnd(stages, idx)
		cur.models = []mongo.WriteModel{upsertPipeline(key, arr)}
		cur.bytes = len(arr)
		steps = append(steps, cur)
		cur = &step{key: key}
		stages = make([]byte, 0, 256)
		idx, stages = bsoncore.AppendArrayStart(stages)
		n = 0
	}
	if t >= 0 {
		cur.events, cur.superseded = append(cur.events, evs[:t]...), t
		tc := changeOf(evs[t])
		stages = appendReplaceStage(stages, n, tc.ver, pl.floor(evs[0]), pl.marker(*tc))
		cur.events = append(cur.events, evs[t])
		n++
	}
	for _, e := range evs[t+1:] {
		before := len(stages)
		stages = appendMergeStage(stages, n, *changeOf(e), pl.floor(e))
		if n > 0 && len(stages) > maxStepBytes {
			stages = stages[:before]
			flush()
			stages = appendMergeStage(stages, n, *changeOf(e), pl.floor(e))
		}
		cur.events = append(cur.events, e)
		n++
	}
	flush()
	return steps
}

// single returns the step that applies e alone.
func (pl *planner) single(e *entry) *step { return pl.write(e, e) }

// write returns the step that writes e, carrying the events of its key from first to e (a
// chain): its guard's floor is first's (floor).
func (pl *planner) write(first, e *entry) *step {
	c := *changeOf(e)
	s := &step{key: c.key, events: []*entry{e}}
	lo := pl.floor(first)
	switch {
	case pl.custom:
		s.models = c.models
	case c.kind == kindTombstone:
		s.models = []mongo.WriteModel{replaceIfNewer(c.key, c.ver, lo, pl.marker(c))}
	case pl.mode == Replace:
		s.models = []mongo.WriteModel{replaceIfNewer(c.key, c.ver, lo, c.doc)}
	default:
		idx, arr := bsoncore.AppendArrayStart(nil)
		arr = appendMergeStage(arr, 0, c, lo)
		arr, _ = bsoncore.AppendArrayEnd(arr, idx)
		s.models = []mongo.WriteModel{upsertPipeline(c.key, arr)}
	}
	return s
}

// rawArray is an encoded BSON array (an update pipeline) that the driver sends as it is.
type rawArray []byte

func (a rawArray) MarshalBSONValue() (byte, []byte, error) {
	return byte(bsoncore.TypeArray), a, nil
}

func idFilter(key string) bson.Raw {
	idx, dst := bsoncore.AppendDocumentStart(make([]byte, 0, len(key)+16))
	dst = bsoncore.AppendStringElement(dst, fieldID, key)
	doc, _ := bsoncore.AppendDocumentEnd(dst, idx)
	return bson.Raw(doc)
}

func upsertPipeline(key string, pipeline []byte) mongo.WriteModel {
	return mongo.NewUpdateOneModel().SetFilter(idFilter(key)).SetUpdate(rawArray(pipeline)).SetUpsert(true)
}

// replaceIfNewer upserts doc as key's document unless the stored one has a version of ver or
// more, or one below lo (when lo is positive): [{$replaceWith: {$cond: {if: <guard>, then:
// {$literal: doc}, else: "$$ROOT"}}}] (appendGuard). A missing document (and so a missing _v)
// is older than every version, and below no floor.
func replaceIfNewer(key string, ver, lo int64, doc bsoncore.Document) mongo.WriteModel {
	idx, arr := bsoncore.AppendArrayStart(make([]byte, 0, len(doc)+128))
	arr = appendReplaceStage(arr, 0, ver, lo, doc)
	arr, _ = bsoncore.AppendArrayEnd(arr, idx)
	return upsertPipeline(key, arr)
}

func appendReplaceStage(dst []byte, i int, ver, lo int64, doc bsoncore.Document) []byte {
	si, dst := bsoncore.AppendDocumentElementStart(dst, arrayKey(i))
	ri, dst := bsoncore.AppendDocumentElementStart(dst, "$replaceWith")
	ci, dst := bsoncore.AppendDocumentElementStart(dst, "$cond")
	dst = appendGuard(dst, "if", ver, lo)
	li, dst := bsoncore.AppendDocumentElementStart(dst, "then")
	dst = bsoncore.AppendDocumentElement(dst, "$literal", doc)
	dst, _ = bsoncore.AppendDocumentEnd(dst, li)
	dst = bsoncore.AppendStringElement(dst, "else", "$$ROOT")
	dst, _ = bsoncore.AppendDocumentEnd(dst, ci)
	dst, _ = bsoncore.AppendDocumentEnd(dst, ri)
	dst, _ = bsoncore.AppendDocumentEnd(dst, si)
	return dst
}

// appendMergeStage appends the $set stage of a merge event: each field it names is set (or
// removed, for null) and the metadata updated, all only if the document is older than the
// event (and not more than the step below it: lo, appendGuard). Every expression of a $set
// stage reads the stage's input, so the guard is the same for all; _v comes last all the
// same.
func appendMergeStage(dst []byte, i int, c change, lo int64) []byte {
	si, dst := bsoncore.AppendDocumentElementStart(dst, arrayKey(i))
	ai, dst := bsoncore.AppendDocumentElementStart(dst, "$set")
	elems, _ := c.doc.Elements()
	for _, el := range elems {
		dst = appendCondField(dst, c.ver, lo, el.Key(), func(dst []byte) []byte {
			li, dst := bsoncore.AppendDocumentElementStart(dst, "1")
			dst = bsoncore.AppendValueElement(dst, "$literal", el.Value())
			dst, _ = bsoncore.AppendDocumentEnd(dst, li)
			return dst
		})
	}
	remove := func(dst []byte) []byte { return bsoncore.AppendStringElement(dst, "1", "$$REMOVE") }
	for _, name := range c.unset {
		dst = appendCondField(dst, c.ver, lo, name, remove)
	}
	dst = appendCondField(dst, c.ver, lo, fieldTS, func(dst []byte) []byte { return bsoncore.AppendDateTimeElement(dst, "1", c.ts) })
	dst = appendCondField(dst, c.ver, lo, fieldTopic, func(dst []byte) []byte { return bsoncore.AppendStringElement(dst, "1", c.topic) })
	dst = appendCondField(dst, c.ver, lo, fieldDeleted, remove)
	dst = appendCondField(dst, c.ver, lo, fieldExpires, remove)
	dst = appendCondField(dst, c.ver, lo, fieldVersion, func(dst []byte) []byte { return bsoncore.AppendInt64Element(dst, "1", c.ver) })
	dst, _ = bsoncore.AppendDocumentEnd(dst, ai)
	dst, _ = bsoncore.AppendDocumentEnd(dst, si)
	return dst
}

// appendCondField appends name: {$cond: [<guard>, <then>, "$name"]} (appendGuard).
func appendCondField(dst []byte, ver, lo int64, name string, then func([]byte) []byte) []byte {
	fi, dst := bsoncore.AppendDocumentElementStart(dst, name)
	ci, dst := bsoncore.AppendArrayElementStart(dst, "$cond")
	dst = appendGuard(dst, "0", ver, lo)
	dst = then(dst)
	dst = bsoncore.AppendStringElement(dst, "2", "$"+name)
	dst, _ = bsoncore.AppendArrayEnd(dst, ci)
	dst, _ = bsoncore.AppendDocumentEnd(dst, fi)
	return dst
}

// appendGuard appends key: {$lt: ["$_v", ver]}, the version guard; with a positive floor lo,
// key: {$and: [{$lt: ["$_v", ver]}, {$gte: [{$ifNull: ["$_v", lo]}, lo]}]}: also not over a
// stored version below lo (a missing one is below no floor).
func appendGuard(dst []byte, key string, ver, lo int64) []byte {
	gi, dst := bsoncore.AppendDocumentElementStart(dst, key)
	if lo <= 0 {
		dst = appendLess(dst, ver)
		dst, _ = bsoncore.AppendDocumentEnd(dst, gi)
		return dst
	}
	ai, dst := bsoncore.AppendArrayElementStart(dst, "$and")
	li, dst := bsoncore.AppendDocumentElementStart(dst, "0")
	dst = appendLess(dst, ver)
	dst, _ = bsoncore.AppendDocumentEnd(dst, li)
	fi, dst := bsoncore.AppendDocumentElementStart(dst, "1")
	gai, dst := bsoncore.AppendArrayElementStart(dst, "$gte")
	ni, dst := bsoncore.AppendDocumentElementStart(dst, "0")
	nai, dst := bsoncore.AppendArrayElementStart(dst, "$ifNull")
	dst = bsoncore.AppendStringElement(dst, "0", "$"+fieldVersion)
	dst = bsoncore.AppendInt64Element(dst, "1", lo)
	dst, _ = bsoncore.AppendArrayEnd(dst, nai)
	dst, _ = bsoncore.AppendDocumentEnd(dst, ni)
	dst = bsoncore.AppendInt64Element(dst, "1", lo)
	dst, _ = bsoncore.AppendArrayEnd(dst, gai)
	dst, _ = bsoncore.AppendDocumentEnd(dst, fi)
	dst, _ = bsoncore.AppendArrayEnd(dst, ai)
	dst, _ = bsoncore.AppendDocumentEnd(dst, gi)
	return dst
}

// appendLess appends $lt: ["$_v", ver].
func appendLess(dst []byte, ver int64) []byte {
	ai, dst := bsoncore.AppendArrayElementStart(dst, "$lt")
	dst = bsoncore.AppendStringElement(dst, "0", "$"+fieldVersion)
	dst = bsoncore.AppendInt64Element(dst, "1", ver)
	dst, _ = bsoncore.AppendArrayEnd(dst, ai)
	return dst
}

var arrayKeys = func() []string {
	k := make([]string, 64)
	for i := range k {
		k[i] = strconv.Itoa(i)
	}
	return k
}()

func arrayKey(i int) string {
	if i < len(arrayKeys) {
		return arrayKeys[i]
	}
	return strconv.Itoa(i)
}
