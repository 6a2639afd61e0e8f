package projection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/internal/retry"
)

// liveCheckInterval is how often a running projection reads its live generation.
const liveCheckInterval = time.Second

// Changelog is a changelog projection: it keeps one document per event key in a collection
// (see docs/views.md for the document's shape). It is a process component: Run runs it as one
// replica of the projection's consumer group; start more processes to share the partitions.
type Changelog struct {
	cfg Config
	bus Bus
	db  *mongo.Database
	dl  DeadLetters
	set settings
	m   *metrics
	dec decoder
	pl  planner

	mu      sync.Mutex
	live    *Live
	eng     *engine
	running bool
}

// NewChangelog returns the changelog projection of cfg (Collection required), reading
// through bus, writing to client's cfg.Database and dead-letters to dl.
//
// Options: WithLogger, WithRegisterer, WithMiddlewares, WithWriteModels, WithTracerProvider.
//
// Errors: jetbus.ErrInvalidTopic, jetbus.ErrInvalidGroup and ErrInvalidConfig (Config.Validate,
// a missing Collection, nil dependencies).
func NewChangelog(bus Bus, client *mongo.Client, dl DeadLetters, cfg Config, opts ...Option) (*Changelog, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Collection == "" {
		return nil, fmt.Errorf("%w: Collection is required for a changelog projection", ErrInvalidConfig)
	}
	if bus == nil || client == nil || dl == nil {
		return nil, fmt.Errorf("%w: nil Bus, MongoDB client or DeadLetters", ErrInvalidConfig)
	}
	set, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if set.writeModels != nil && cfg.History > 0 {
		return nil, fmt.Errorf("%w: History needs the built-in modes: with WithWriteModels the projection cannot know a document's state", ErrInvalidConfig)
	}
	m, err := newMetrics(set.reg)
	if err != nil {
		return nil, err
	}
	m.seed(cfg.Name)
	c := &Changelog{cfg: cfg, bus: bus, db: client.Database(cfg.Database), dl: dl, set: set, m: m,
		pl: planner{mode: cfg.Mode, tomb: cfg.Tombstones, custom: set.writeModels != nil, retention: cfg.DeletedRetention, now: time.Now}}
	if cfg.Version != "" && set.writeModels == nil && cfg.MaxVersionStep < UnboundedVersionStep {
		c.pl.step = cfg.MaxVersionStep
	}
	c.dec.mode = cfg.Mode
	if cfg.Version != "" {
		c.dec.version, _ = parsePointer(cfg.Version)
	}
	return c, nil
}

// Name is the component's name: "projection/<name>".
func (c *Changelog) Name() string { return "projection/" + c.cfg.Name }

// Ready reports whether the projection consumes its topic.
func (c *Changelog) Ready(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng == nil || !c.running {
		return errors.New("not consuming yet")
	}
	return nil
}

// Status describes the projection for /v1/ops/status.
func (c *Changelog) Status(context.Context) (any, error) {
	c.mu.Lock()
	live, eng := c.live, c.eng
	c.mu.Unlock()
	return status(c.cfg, live, eng), nil
}

// ProjectionStatus is a projection's entry in /v1/ops/status.
type ProjectionStatus struct {
	Projection string           `json:"projection"`
	Live       *Live            `json:"live,omitempty"`
	Owned      map[string][]int `json:"owned"`
	LastError  string           `json:"last_error,omitempty"`
}

func status(cfg Config, live *Live, eng *engine) ProjectionStatus {
	st := ProjectionStatus{Projection: cfg.Name, Live: live, Owned: map[string][]int{}}
	if eng != nil {
		st.Owned = eng.owned()
		if err := eng.failing(); err != nil {
			st.LastError = err.Error()
		}
	}
	return st
}

// Run runs the projection until ctx is done: it reads the live generation, creates the
// declared indexes, and consumes into the live collection as a member of the live group. When
// a rebuild switches the live generation, it stops and continues with the new one. It
// returns nil once stopped (each partition writes and acknowledges what it holds first), or
// the error that stopped it: a closed connection, or indexes MongoDB refuses.
func (c *Changelog) Run(ctx context.Context) error {
	log := c.set.log.With("projection", c.cfg.Name)
	for {
		var live *Live
		err := c.retry(ctx, "read the live generation", func(ctx context.Context) error {
			var err error
			live, err = readLive(ctx, c.db, c.cfg.Name, c.cfg.Collection)
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		v := c.newView(live.Group, live.Collection)
		if err := c.retry(ctx, "create indexes", v.ensureIndexes); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("projection %s: indexes of %s: %w", c.cfg.Name, live.Collection, retry.Opaque(err))
		}
		eng := v.engine()
		c.mu.Lock()
		c.live, c.eng, c.running = live, eng, true
		c.mu.Unlock()
		c.m.setGeneration(c.cfg.Name, live.Generation)
		c.m.setRebuild(c.cfg.Name, live.Rebuild)
		log.Info("projection running", "generation", live.Generation, "collection", live.Collection, "group", live.Group)

		gctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- eng.run(gctx) }()
		next, err := c.watchLive(ctx, live, errc)
		cancel()
		if next {
			err = <-errc
		}
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		if err != nil || !next {
			return err
		}
	}
}

// watchLive waits until ctx is done (false, nil), the engine fails (false, its error) or the
// live generation changes (true, nil: the caller stops the engine and starts the next).
func (c *Changelog) watchLive(ctx context.Context, live *Live, errc <-chan error) (bool, error) {
	t := time.NewTicker(liveCheckInterval)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			return false, err
		case <-ctx.Done():
			return false, <-errc
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, liveCheckInterval)
		l, err := readLive(rctx, c.db, c.cfg.Name, c.cfg.Collection)
		cancel()
		if err != nil {
			continue
		}
		c.m.setRebuild(c.cfg.Name, l.Rebuild)
		c.mu.Lock()
		c.live = l
		c.mu.Unlock()
		if l.Generation != live.Generation {
			c.set.log.Info("live generation switched; following it", "projection", c.cfg.Name, "from", live.Generation, "to", l.Generation)
			return true, nil
		}
	}
}

// retry runs fn until it succeeds, fails with an error that is not transient, or ctx ends.
func (c *Changelog) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	n := 0
	return retry.Do(ctx, retry.Policy{Try: c.cfg.WriteTimeout, Backoff: retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}},
		func(ctx context.Context) error {
			n++
			err := fn(ctx)
			if err != nil && retry.Transient(err) {
				c.set.log.Warn("projection: "+what+" failed; retrying", "projection", c.cfg.Name, "attempt", n, "err", err)
			}
			return err
		})
}

// view is one generation of a changelog projection: its group and collections.
type view struct {
	c     *Changelog
	group string
	coll  *mongo.Collection
	hist  *mongo.Collection // nil without history
	cps   *mongo.Collection
}

func (c *Changelog) newView(group, collection string) *view {
	v := &view{c: c, group: group, coll: c.db.Collection(collection), cps: c.db.Collection(CheckpointsCollection)}
	if c.cfg.History > 0 {
		v.hist = c.db.Collection(HistoryCollection(collection))
	}
	return v
}

func (v *view) engine() *engine {
	c := v.c
	return &engine{name: c.cfg.Name, group: v.group, cfg: c.cfg, bus: c.bus, dl: c.dl, log: c.set.log, m: c.m, mws: c.set.mws, s: v, waitHook: c.set.waitHook,
		tracer: c.set.tracer, target: writeTarget(c.cfg.Database, v.coll.Name(), "bulkWrite")}
}

var _ strategy = (*view)(nil)

// changeOf returns the change decode made of en (a held entry that is neither dead-lettered
// nor settled has one).
func changeOf(en *entry) *change { return en.ev.(*change) }

// open implements strategy: a view keeps nothing per partition (its checkpoints are written
// with each batch).
func (v *view) open(context.Context, *partState) error { return nil }

// close implements strategy.
func (v *view) close(*partState) {}

// decode implements strategy: it turns a delivery into a change (en.ev), or marks it for
// the DLQ.
func (v *view) decode(en *entry) { v.c.decode(en) }

func (c *Changelog) decode(en *entry) {
	if c.set.writeModels != nil {
		ch := &change{key: en.d.Key, topic: en.d.Topic, ts: en.d.TS.UnixMilli(), ver: seqVersion(en.d.Seq)}
		en.ev = ch
		if c.dec.version != nil && !en.d.Tombstone() {
			at, ok := c.dec.version.lookup(gjson.ParseBytes(en.d.Payload))
			if !ok {
				en.deadLetter(dataErrorf("event %s: the payload has no version at %s", en.d.ID, c.dec.version))
				return
			}
			v, err := integer(at)
			if err != nil {
				en.deadLetter(dataErrorf("event %s: the version at %s %v", en.d.ID, c.dec.version, err))
				return
			}
			ch.ver = v
		} else if c.dec.version != nil {
			v, err := c.dec.tombstoneVersion(en.d)
			if err != nil {
				en.deadLetter(err)
				return
			}
			ch.ver = v
		}
		ms, err := c.set.writeModels(en.d, ch.ver)
		switch {
		case err != nil:
			en.deadLetter(&DataError{Msg: fmt.Sprintf("event %s: write models: %v", en.d.ID, err)})
		case len(ms) == 0:
			en.out = outSkipped
			en.noop = true
		default:
			ch.models = ms
		}
		return
	}
	ch, err := c.dec.decode(en.d)
	if err != nil {
		en.deadLetter(err)
		return
	}
	en.ev = &ch
}

// deletedTTLIndex is the TTL index that removes deleted keys' markers (delete mode).
const deletedTTLIndex = "jetbus_deleted_ttl"

// ensureIndexes creates the declared indexes of the view and its history's, idempotently. A
// unique index covers only the documents that have all its fields (a partial index), so that
// deleted keys' markers, which have none, never clash.
func (v *view) ensureIndexes(ctx context.Context) error {
	var models []mongo.IndexModel
	if v.c.cfg.Tombstones == DeleteTombstones && v.c.set.writeModels == nil {
		models = append(models, mongo.IndexModel{Keys: bson.D{{Key: fieldExpires, Value: 1}},
			Options: options.Index().SetName(deletedTTLIndex).SetExpireAfterSeconds(0)})
	}
	if len(v.c.cfg.Indexes) > 0 {
		for _, ix := range v.c.cfg.Indexes {
			keys := bson.D{}
			present := bson.D{}
			for _, f := range ix.Fields {
				dir := 1
				if strings.HasPrefix(f, "-") {
					f, dir = f[1:], -1
				}
				keys = append(keys, bson.E{Key: f, Value: dir})
				present = append(present, bson.E{Key: f, Value: bson.D{{Key: "$exists", Value: true}}})
			}
			o := options.Index()
			if ix.Unique {
				o.SetUnique(true).SetPartialFilterExpression(present)
			}
			if ix.Name != "" {
				o.SetName(ix.Name)
			}
			models = append(models, mongo.IndexModel{Keys: keys, Options: o})
		}
	}
	if len(models) > 0 {
		if _, err := v.coll.Indexes().CreateMany(ctx, models); err != nil {
			return err
		}
	}
	if v.hist != nil {
		return ensureHistoryIndexes(ctx, v.hist, v.c.cfg.History)
	}
	return nil
}

// keyEvents is one key's events in a batch, in stream order: all of them, and those that
// apply (chain, chainOver), which the key's writes carry. known says they were judged over
// the stored version (chainOver): a stored version only rises, so the guard's floor cannot
// refuse their writes.
type keyEvents struct {
	key   string
	all   []*entry
	evs   []*entry
	known bool
}

// apply implements strategy. It writes one batch: each key's events coalesced into as few writes as possible (one,
// usually), every write guarded by the version, all keys in one unordered bulk write per
// round; then the history, then the partition's checkpoint. A write MongoDB refuses for one
// document (a data error) dead-letters that event and the rest lands; any other failure
// returns an error and the whole batch is tried again, which the version guards make
// harmless.
func (v *view) apply(ctx context.Context, _ *partState, b *batch) error {
	var keys []*keyEvents
	byKey := map[string]*keyEvents{}
	var maxSeq uint64
	for _, en := range b.entries {
		maxSeq = max(maxSeq, en.d.Seq)
		if en.noop || en.out == outDeadLetter {
			continue
		}
		en.out = outPending
		key := changeOf(en).key
		k := byKey[key]
		if k == nil {
			k = &keyEvents{key: key}
			byKey[key] = k
			keys = append(keys, k)
		}
		k.evs = append(k.evs, en)
	}
	var pre map[string]bson.Raw
	if v.hist != nil {
		var err error
		if pre, err = v.preRead(ctx, b, keys); err != nil {
			return err
		}
	}
	if err := v.chains(ctx, keys, pre); err != nil {
		return err
	}
	if err := v.rounds(ctx, keys); err != nil {
		return err
	}
	if v.hist != nil {
		if err := v.writeHistory(ctx, keys, pre); err != nil {
			return err
		}
	}
	return advanceCheckpoint(ctx, v.cps, CheckpointID(v.group, b.topic, b.p), maxSeq)
}

// chains keeps, of each key's events, those that apply in stream order (keyEvents.evs); the
// others are stale or, too far above the version before them, dead-lettered. An event not
// newer than an earlier one of its key in the batch never applies. Not knowing the stored
// version, the first event is kept and its write's guard judges it (rounds); a key whose
// versions rise by more than the step from one event to the next — a producer jumping, rare
// — has its stored version read first. With history the stored versions are known (pre).
func (v *view) chains(ctx context.Context, keys []*keyEvents, pre map[string]bson.Raw) error {
	pl := &v.c.pl
	var unknown []*keyEvents
	for _, k := range keys {
		k.all = k.evs
		switch {
		case pre != nil && pl.step > 0:
			cur, has := storedVersion(pre[k.key])
			pl.chainOver(k, cur, has)
		case !pl.chain(k):
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	stored, err := v.readVersions(ctx, unknown)
	if err != nil {
		return err
	}
	for _, k := range unknown {
		sv := stored[k.key]
		pl.chainOver(k, sv.ver, sv.has)
	}
	return nil
}

// chain keeps k's events that apply after its first one, whose write's guard judges it, and
// marks the others stale. It returns false, keeping nothing, when an event is more than the
// step above the one kept before it: whether that one applies depends on the stored version
// (chainOver).
func (pl *planner) chain(k *keyEvents) bool {
	kept := k.all[:0:0]
	var top int64
	for i, en := range k.all {
		ver := changeOf(en).ver
		switch {
		case i == 0 || (ver > top && !pl.tooFar(top, ver)):
			kept = append(kept, en)
			top = ver
		case ver <= top:
			en.out = outStale
		default:
			return false
		}
	}
	k.evs = kept
	return true
}

// chainOver keeps k's events that apply in stream order over the stored version cur (has:
// there is one): each newer than the last applied and not more than the step above it. The
// others are stale, or dead-lettered. Events an earlier round wrote are left as they are.
func (pl *planner) chainOver(k *keyEvents, cur int64, has bool) {
	kept := k.all[:0:0]
	for _, en := range k.all {
		switch en.out {
		case outWritten, outCoalesced, outDeadLetter:
			continue
		}
		en.out = outPending
		ver := changeOf(en).ver
		switch {
		case has && ver <= cur:
			en.out = outStale
		case has && pl.tooFar(cur, ver):
			en.deadLetter(dataErrorf("event %s: version %d is more than max_version_step (%d) above the key's version %d: refused, so that one event cannot put the key beyond the reach of every later version",
				en.d.ID, ver, pl.step, cur))
		default:
			kept = append(kept, en)
			cur, has = ver, true
		}
	}
	k.evs, k.known = kept, true
}

// storedVer is a key's stored version; has is false when the key has no document, or one
// without a version.
type storedVer struct {
	ver int64
	has bool
}

// readVersions reads the stored versions of keys.
func (v *view) readVersions(ctx context.Context, keys []*keyEvents) (map[string]storedVer, error) {
	ids := make(bson.A, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.key)
	}
	cur, err := v.coll.Find(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: fieldVersion, Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	m := make(map[string]storedVer, len(keys))
	for cur.Next(ctx) {
		if id, ok := cur.Current.Lookup(fieldID).StringValueOK(); ok {
			ver, has := storedVersion(cur.Current)
			m[id] = storedVer{ver: ver, has: has}
		}
	}
	return m, cur.Err()
}

// storedVersion returns the version of a stored view document, as the guards compare it: a
// missing or null _v is no version; a number is its integer part; anything else sorts below
// every number (MinKey) or above (strings, documents, …).
func storedVersion(doc bson.Raw) (int64, bool) {
	if doc == nil {
		return 0, false
	}
	v := doc.Lookup(fieldVersion)
	var f float64
	switch v.Type {
	case bson.TypeInt64:
		return v.Int64(), true
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case 0, bson.TypeNull, bson.TypeUndefined:
		return 0, false
	case bson.TypeMinKey:
		return math.MinInt64, true
	case bson.TypeDouble:
		f = v.Double()
	case bson.TypeDecimal128:
		f, _ = strconv.ParseFloat(v.Decimal128().String(), 64)
	default:
		return math.MaxInt64, true
	}
	switch {
	case math.IsNaN(f) || f < math.MinInt64:
		return math.MinInt64, true // NaN sorts below every number
	case f >= math.MaxInt64:
		return math.MaxInt64, true
	}
	return int64(math.Floor(f)), true
}

// rounds writes the keys' steps: round r writes the r-th step of every key that has one, in
// one unordered bulk write.
func (v *view) rounds(ctx context.Context, keys []*keyEvents) error {
	c := v.c
	queues := make([][]*step, len(keys))
	for i, k := range keys {
		if len(k.evs) > 0 {
			queues[i] = c.pl.plan(k.key, k.evs)
		}
	}
	var (
		models []mongo.WriteModel
		owner  []int // model index → key index
	)
	for {
		models, owner = models[:0], owner[:0]
		deletes := 0
		for i, q := range queues {
			if len(q) == 0 {
				continue
			}
			for _, m := range q[0].models {
				if _, ok := m.(*mongo.DeleteOneModel); ok {
					deletes++
				}
				models = append(models, m)
				owner = append(owner, i)
			}
		}
		if len(models) == 0 {
			return nil
		}
		t0 := time.Now()
		res, err := v.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		c.m.writeSeconds(c.cfg.Name, time.Since(t0).Seconds())
		refused := map[int]*DataError{}
		if err != nil {
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
				return err
			}
			for _, we := range bwe.WriteErrors {
				de := classifyWriteError(we.WriteError)
				if de == nil {
					return err // not about the document: try the batch again
				}
				if we.Index >= 0 && we.Index < len(owner) {
					if _, seen := refused[owner[we.Index]]; !seen {
						refused[owner[we.Index]] = de
					}
				}
			}
		}
		var after map[int]storedVer
		if res != nil {
			writes := int64(len(models) - len(refused))
			applied := res.ModifiedCount + res.UpsertedCount + res.DeletedCount
			if c.pl.step > 0 && writes > applied {
				// Some writes changed nothing: stale, or refused by the guard's floor.
				if after, err = v.unapplied(ctx, keys, queues, refused); err != nil {
					return err
				}
			}
			c.m.write(c.cfg.Name, applied, max(writes-applied-int64(len(after)), 0))
		}
		for i, q := range queues {
			if len(q) == 0 {
				continue
			}
			s := q[0]
			de, bad := refused[i]
			sv, far := after[i]
			switch {
			case far && !sv.has:
				// The document is gone since (deleted, expired): write the step again.
			case far:
				// Its first event is more than the step above the stored version: judge
				// the key's events again over it.
				c.pl.chainOver(keys[i], sv.ver, true)
				queues[i] = nil
				if evs := keys[i].evs; len(evs) > 0 {
					queues[i] = c.pl.plan(keys[i].key, evs)
				}
			case !bad:
				s.settle()
				queues[i] = q[1:]
			case len(s.events) == 1:
				s.events[0].deadLetter(de)
				queues[i] = q[1:]
			default:
				// Which event MongoDB refused is unknown: write them one at a time.
				singles := make([]*step, 0, len(s.events)+len(q)-1)
				for _, en := range s.events {
					singles = append(singles, c.pl.single(en))
				}
				queues[i] = append(singles, q[1:]...)
			}
		}
	}
}

// unapplied reads, after a round in which some writes changed nothing, the stored versions
// of the round's keys whose events were not judged over their stored version, and returns
// those of the keys whose step did not apply although it was newer: the guard's floor
// refused it (keyed by key index), or the document is gone (no version). A step whose last
// event is not above the stored version was stale, or applied. This read is the rare path:
// a stale write (a redelivery, a replay) or a producer's jump.
func (v *view) unapplied(ctx context.Context, keys []*keyEvents, queues [][]*step, refused map[int]*DataError) (map[int]storedVer, error) {
	judged := func(i int) bool {
		_, bad := refused[i]
		return len(queues[i]) > 0 && !bad && !keys[i].known
	}
	var written []*keyEvents
	for i := range queues {
		if judged(i) {
			written = append(written, keys[i])
		}
	}
	if len(written) == 0 {
		return nil, nil
	}
	stored, err := v.readVersions(ctx, written)
	if err != nil {
		return nil, err
	}
	out := map[int]storedVer{}
	for i, q := range queues {
		if !judged(i) {
			continue
		}
		s := q[0]
		sv := stored[keys[i].key]
		if !sv.has || sv.ver < changeOf(s.events[len(s.events)-1]).ver {
			out[i] = sv
		}
	}
	return out, nil
}

// settle records the outcome of a step that was written: its last event's effect is in
// the view, or the version guard kept a newer one; the earlier events it accounted for were
// superseded.
func (s *step) settle() {
	for i, en := range s.events {
		if en.out != outPending {
			continue
		}
		if i < s.superseded {
			en.out = outCoalesced
		} else {
			en.out = outWritten
		}
	}
}

// classifyWriteError returns the DataError of a write error that is about the document
// written, or nil for a failure that may pass (the batch is then written again).
func classifyWriteError(we mongo.WriteError) *DataError {
	switch we.Code {
	case 11000, 11001:
		// A clash on _id is two upserts of a new key racing (another owner's): try again.
		if strings.Contains(we.Message, " index: _id_ ") {
			return nil
		}
		return &DataError{Code: we.Code, Msg: we.Message}
	case 2, // BadValue
		9,     // FailedToParse (a custom write model)
		14,    // TypeMismatch
		15,    // Overflow
		16,    // InvalidLength
		28,    // PathNotViable
		40,    // ConflictingUpdateOperators
		52,    // DollarPrefixedFieldName
		55,    // InvalidDBRef
		56,    // EmptyFieldName
		57,    // DottedFieldName
		66,    // ImmutableField
		121,   // DocumentValidationFailure
		10334, // BSONObjectTooLarge
		17280, // KeyTooLong
		17419: // the document after the update is too large
		return &DataError{Code: we.Code, Msg: we.Message}
	}
	return nil
}
