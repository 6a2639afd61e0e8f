package schema

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// DefaultBucket is the KV bucket that holds the registry.
const DefaultBucket = "jetbus_schemas"

// JetStream is what the Registry needs of a JetStream context: natsjs.JetStream has it.
type JetStream interface {
	KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error)
	CreateKeyValue(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error)
}

var _ JetStream = natsjs.JetStream(nil)

// Version is one registered version of a topic's schema.
type Version struct {
	Topic   string `json:"topic"`
	Version int    `json:"version"`
	// Schema is the JSON Schema document as registered.
	Schema json.RawMessage `json:"schema"`
	// Mode and Policy are what the version was checked under when registered.
	Mode   Mode   `json:"mode"`
	Policy Policy `json:"policy,omitempty"`
	// Upcast is the declarative upcaster from the previous version to this one. nil means
	// there is none; an empty, non-nil list declares the hop an identity.
	Upcast []Op `json:"upcast"`
	// Deleted marks a soft-deleted version: it is no longer the latest, nor compared with by
	// compatibility checks, nor used to validate publishes; its upcaster still applies.
	Deleted bool `json:"deleted,omitempty"`
	// Fingerprint is the SHA-256 of the schema's canonical form (sorted keys, normalized
	// numbers); two schemas with the same fingerprint are the same schema.
	Fingerprint string    `json:"fingerprint"`
	Created     time.Time `json:"created"`
	// Revision is the KV revision of the record.
	Revision uint64 `json:"-"`
}

func (v *Version) clone() *Version {
	c := *v
	c.Schema = slices.Clone(v.Schema)
	if v.Upcast != nil {
		c.Upcast = slices.Clone(v.Upcast)
	}
	return &c
}

// topicConfig is the record at "c.<topic>".
type topicConfig struct {
	Mode   Mode   `json:"mode,omitempty"`
	Policy Policy `json:"policy,omitempty"`
}

// entry is a cached version with its compiled schema.
type entry struct {
	v     *Version
	c     *compiled // shared by the revisions of a version with the same schema
	up    Upcaster  // the declarative upcaster from the previous version, if any
	upErr error
}

// compiled is a schema compiled on first use.
type compiled struct {
	once sync.Once
	val  *Validator
	err  error
}

func (e *entry) validator() (*Validator, error) {
	e.c.once.Do(func() {
		doc, err := decodeJSON(e.v.Schema)
		if err != nil {
			e.c.err = fmt.Errorf("%w: stored %s v%d: %v", ErrInvalidSchema, e.v.Topic, e.v.Version, err)
			return
		}
		s, err := compile(fmt.Sprintf("mem:///%s/v%d.json", e.v.Topic, e.v.Version), doc)
		if err != nil {
			e.c.err = err
			return
		}
		e.c.val = &Validator{topic: e.v.Topic, version: e.v.Version, s: s}
	})
	return e.c.val, e.c.err
}

// topicState is the cached view of one topic.
type topicState struct {
	versions map[int]*entry // every version, deleted ones too
	config   topicConfig
}

func (t *topicState) latest() *entry {
	var best *entry
	for _, e := range t.versions {
		if !e.v.Deleted && (best == nil || e.v.Version > best.v.Version) {
			best = e
		}
	}
	return best
}

func (t *topicState) live() []*entry {
	var out []*entry
	for _, e := range t.versions {
		if !e.v.Deleted {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *entry) int { return a.v.Version - b.v.Version })
	return out
}

func (t *topicState) maxVersion() int {
	n := 0
	for v := range t.versions {
		n = max(n, v)
	}
	return n
}

// Registry is the schema registry of every topic, kept in a JetStream KV bucket so that every
// process shares it. It watches the bucket, so a version registered by one process is
// enforced by the others as soon as the watch delivers it. It is safe for concurrent use.
type Registry struct {
	kv  natsjs.KeyValue
	opt options
	log *slog.Logger

	mu        sync.RWMutex
	topics    map[string]*topicState
	upcasters map[string]map[int]Upcaster

	cancel    context.CancelFunc
	watchDone chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// Open opens the registry in js, creating its bucket if needed, and waits until it has read
// the bucket's current content. Options:
//
//   - WithBucket(name): the KV bucket (default DefaultBucket).
//   - WithReplicas(n): replicas of the bucket when Open creates it (default 1).
//   - WithStrict(): the publish middleware refuses topics without a schema (ErrNoSchema).
//   - WithDefaultMode(m): the mode of topics with no mode set (default BACKWARD).
//   - WithPolicy(p): the policy of topics with no policy set (default STRICT).
//   - WithUpcaster(topic, from, fn): a Go upcaster, as AddUpcaster.
//   - WithResyncInterval(d): how often the watch is checked against the bucket (default 1s).
//   - WithLogger(l): where to log (nil: discard).
//
// Close the Registry to stop its watch.
func Open(ctx context.Context, js JetStream, opts ...Option) (*Registry, error) {
	o := options{bucket: DefaultBucket, replicas: 1, mode: DefaultMode, policy: PolicyStrict, resync: DefaultResyncInterval}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	kv, err := js.KeyValue(ctx, o.bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      o.bucket,
			Description: "jetbus schema registry",
			History:     8,
			Replicas:    o.replicas,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, o.bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("schema: open bucket %s: %w", o.bucket, retry.Opaque(err))
	}
	log := o.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		kv:        kv,
		opt:       o,
		log:       log,
		topics:    map[string]*topicState{},
		upcasters: map[string]map[int]Upcaster{},
		watchDone: make(chan struct{}),
		closed:    make(chan struct{}),
	}
	for _, u := range o.upcasters {
		if err := r.AddUpcaster(u.topic, u.from, u.fn); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("schema: watch bucket %s: %w", o.bucket, retry.Opaque(err))
	}
	r.cancel = cancel
	ready := make(chan struct{})
	go r.watch(wctx, w, ready)
	select {
	case <-ready:
		return r, nil
	case <-r.watchDone:
		cancel()
		return nil, fmt.Errorf("schema: watch of bucket %s ended before the initial values", o.bucket)
	case <-ctx.Done():
		r.Close()
		return nil, ctx.Err()
	}
}

// watch applies the bucket's changes to the cache until Close. Every resync interval it
// compares the bucket's last sequence with the last revision the watch delivered; when the
// watch is behind and has not moved for a whole interval (it stalled, e.g. its consumer was
// lost in a server restart) it is replaced by a new one resuming after the last revision seen.
func (r *Registry) watch(ctx context.Context, w natsjs.KeyWatcher, ready chan struct{}) {
	defer close(r.watchDone)
	defer func() { _ = w.Stop() }()
	updates := w.Updates()
	tick := time.NewTicker(r.opt.resync)
	defer tick.Stop()
	initial, behind := true, false
	var lastRev, stuckAt uint64
	for {
		select {
		case <-r.closed:
			return
		case e, ok := <-updates:
			if !ok {
				updates = nil // ended by the library: the next checks restart it
				continue
			}
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			lastRev = max(lastRev, e.Revision())
			r.apply(e.Key(), e.Value(), e.Revision(), e.Operation() != natsjs.KeyValuePut)
		case <-tick.C:
			if initial {
				continue
			}
			if updates != nil {
				last, err := r.lastSeq(ctx)
				if err != nil || last <= lastRev {
					behind = false
					continue
				}
				if !behind || lastRev != stuckAt {
					// A change may just be on its way, or the watch is busy but moving: check
					// again next time.
					behind, stuckAt = true, lastRev
					continue
				}
				r.log.Warn("schema: registry watch fell behind, restarting it", "seen", lastRev, "stored", last)
			}
			nw, err := r.kv.WatchAll(ctx, natsjs.ResumeFromRevision(lastRev+1))
			if err != nil {
				r.log.Warn("schema: restarting the registry watch", "err", err)
				continue
			}
			_ = w.Stop()
			w, updates, behind = nw, nw.Updates(), false
		}
	}
}

// lastSeq returns the bucket's last sequence: the revision of its latest change.
func (r *Registry) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opt.resync)
	defer cancel()
	st, err := r.kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*natsjs.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("schema: unexpected bucket status %T", st)
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// Key layout: "v.<topic>.<version>" holds a Version, "c.<topic>" a topicConfig.
func versionKey(topic string, v int) string { return "v." + topic + "." + strconv.Itoa(v) }
func configKey(topic string) string         { return "c." + topic }

func parseKey(key string) (kind, topic string, version int, ok bool) {
	switch {
	case strings.HasPrefix(key, "v."):
		rest := key[2:]
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 {
			return "", "", 0, false
		}
		n, err := strconv.Atoi(rest[i+1:])
		if err != nil || n <= 0 {
			return "", "", 0, false
		}
		return "v", rest[:i], n, true
	case strings.HasPrefix(key, "c."):
		return "c", key[2:], 0, true
	}
	return "", "", 0, false
}

// apply updates the cache with one KV entry.
func (r *Registry) apply(key string, value []byte, rev uint64, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	applyEntry(r.topics, r.log, key, value, rev, deleted)
}

// applyEntry updates topics with one KV entry. Revisions older than the cached one are
// ignored, so the watch and a process's own writes can apply the same record in any order.
func applyEntry(topics map[string]*topicState, log *slog.Logger, key string, value []byte, rev uint64, deleted bool) {
	kind, topic, version, ok := parseKey(key)
	if !ok {
		log.Warn("schema: ignoring unknown registry key", "key", key)
		return
	}
	t := topics[topic]
	if t == nil {
		t = &topicState{versions: map[int]*entry{}}
		topics[topic] = t
	}
	switch kind {
	case "c":
		if deleted {
			t.config = topicConfig{}
			return
		}
		var c topicConfig
		if err := json.Unmarshal(value, &c); err != nil {
			log.Warn("schema: ignoring malformed topic config", "key", key, "err", err)
			return
		}
		t.config = c
	case "v":
		if deleted {
			delete(t.versions, version)
			return
		}
		cur := t.versions[version]
		if cur != nil && cur.v.Revision >= rev {
			return
		}
		var v Version
		if err := json.Unmarshal(value, &v); err != nil {
			log.Warn("schema: ignoring malformed version record", "key", key, "err", err)
			return
		}
		v.Topic, v.Version, v.Revision = topic, version, rev
		e := &entry{v: &v, c: &compiled{}}
		if v.Upcast != nil {
			e.up, e.upErr = Declarative(v.Upcast...)
		}
		if cur != nil && cur.v.Fingerprint == v.Fingerprint {
			e.c = cur.c // same schema (e.g. soft-deleted): keep the compiled one
		}
		t.versions[version] = e
	}
}

// Close stops the registry's watch. Calls and middlewares of a closed registry return an
// error wrapping jetbus.ErrClosed.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.cancel()
		<-r.watchDone
	})
	return nil
}

func (r *Registry) isClosed() bool {
	select {
	case <-r.closed:
		return true
	default:
		return false
	}
}

// RegisterOption configures one Register or Check.
type RegisterOption func(*registerOptions) error

type registerOptions struct {
	mode          Mode
	policy        Policy
	upcast        []Op
	expectVersion int
}

// WithMode checks the new version under m instead of the topic's mode, and records m with
// the version.
func WithMode(m Mode) RegisterOption {
	return func(o *registerOptions) error {
		p, err := ParseMode(string(m))
		o.mode = p
		return err
	}
}

// UnderPolicy checks the new version under p instead of the topic's policy.
func UnderPolicy(p Policy) RegisterOption {
	return func(o *registerOptions) error {
		q, err := ParsePolicy(string(p))
		o.policy = q
		return err
	}
}

// WithUpcast stores a declarative upcaster from the previous version with the new one.
// WithUpcast() with no operations declares the hop an identity (the previous version's
// events are valid as they are).
func WithUpcast(ops ...Op) RegisterOption {
	return func(o *registerOptions) error {
		if err := validateOps(ops); err != nil {
			return err
		}
		o.upcast = append([]Op{}, ops...)
		return nil
	}
}

// ExpectVersion makes Register fail with ErrVersionConflict unless the schema becomes (or
// already is) version n. PushDir uses it to keep files and registry in step.
func ExpectVersion(n int) RegisterOption {
	return func(o *registerOptions) error {
		if n <= 0 {
			return fmt.Errorf("%w: ExpectVersion(%d)", jetbus.ErrInvalidOption, n)
		}
		o.expectVersion = n
		return nil
	}
}

// Register adds doc as the next version of topic's schema and returns it. If a live version
// with the same schema exists, Register returns it instead, as Confluent does. The new version
// is checked against the previous live versions under the topic's mode (WithMode overrides);
// an incompatible one is refused with an *IncompatibleError listing every reason. Two
// processes registering at once cannot both create the same version: the record is created
// with a KV create, and the loser checks again against the winner.
//
// Errors: jetbus.ErrInvalidTopic, ErrInvalidSchema, ErrIncompatible, ErrInvalidUpcaster,
// ErrVersionConflict, jetbus.ErrClosed.
func (r *Registry) Register(ctx context.Context, topic string, doc []byte, opts ...RegisterOption) (*Version, error) {
	return r.register(ctx, topic, doc, false, opts)
}

// Check is a dry run of Register: it returns what Register would refuse with, or nil.
func (r *Registry) Check(ctx context.Context, topic string, doc []byte, opts ...RegisterOption) error {
	_, err := r.register(ctx, topic, doc, true, opts)
	return err
}

func (r *Registry) register(ctx context.Context, topic string, doc []byte, dryRun bool, opts []RegisterOption) (*Version, error) {
	if r.isClosed() {
		return nil, errRegistryClosed
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	var o registerOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	cand, err := parseSchema(doc)
	if err != nil {
		return nil, err
	}
	fp := fingerprint(cand)
	for attempt := 0; ; attempt++ {
		state, err := r.read(ctx, topic)
		if err != nil {
			return nil, err
		}
		for _, e := range state.live() {
			if e.v.Fingerprint == fp {
				if o.expectVersion != 0 && o.expectVersion != e.v.Version {
					return nil, fmt.Errorf("%w: %s: the schema is version %d, not %d", ErrVersionConflict, topic, e.v.Version, o.expectVersion)
				}
				return e.v.clone(), nil
			}
		}
		mode := o.mode
		if mode == "" {
			mode = state.config.Mode
		}
		if mode == "" {
			mode = r.opt.mode
		}
		policy := o.policy
		if policy == "" {
			policy = state.config.Policy
		}
		if policy == "" {
			policy = r.opt.policy
		}
		live := state.live()
		prev := make([]any, len(live))
		nums := make([]int, len(live))
		for i, e := range live {
			if prev[i], err = decodeJSON(e.v.Schema); err != nil {
				return nil, fmt.Errorf("%w: stored %s v%d: %v", ErrInvalidSchema, topic, e.v.Version, err)
			}
			nums[i] = e.v.Version
		}
		if reasons := compareAll(policy, mode, cand, prev, nums); len(reasons) > 0 {
			return nil, &IncompatibleError{Topic: topic, Mode: mode, Reasons: reasons}
		}
		next := state.maxVersion() + 1
		if o.expectVersion != 0 && o.expectVersion != next {
			return nil, fmt.Errorf("%w: %s: the schema would become version %d, not %d", ErrVersionConflict, topic, next, o.expectVersion)
		}
		if next == 1 && len(o.upcast) > 0 {
			return nil, fmt.Errorf("%w: %s: version 1 has no previous version to upcast from", ErrInvalidUpcaster, topic)
		}
		if dryRun {
			return nil, nil
		}
		v := &Version{
			Topic: topic, Version: next, Schema: compact(doc), Mode: mode, Policy: policy, Upcast: o.upcast,
			Fingerprint: fp, Created: time.Now().UTC(),
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		rev, err := r.kv.Create(ctx, versionKey(topic, next), data)
		if errors.Is(err, natsjs.ErrKeyExists) && attempt < 20 {
			continue // another process took this version: check again against it
		}
		if err != nil {
			return nil, fmt.Errorf("schema: register %s v%d: %w", topic, next, retry.Opaque(err))
		}
		r.apply(versionKey(topic, next), data, rev, false)
		v.Revision = rev
		r.log.Info("schema: registered", "topic", topic, "version", next, "mode", mode)
		return v.clone(), nil
	}
}

func compact(doc []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return slices.Clone(doc)
	}
	return b.Bytes()
}

func fingerprint(doc any) string {
	sum := sha256.Sum256([]byte(canonical(doc)))
	return hex.EncodeToString(sum[:])
}

// read loads a topic's records straight from KV, bypassing the cache.
func (r *Registry) read(ctx context.Context, topic string) (*topicState, error) {
	w, err := r.kv.WatchFiltered(ctx, []string{"v." + topic + ".*", configKey(topic)})
	if err != nil {
		return nil, fmt.Errorf("schema: read %s: %w", topic, retry.Opaque(err))
	}
	defer func() { _ = w.Stop() }()
	topics := map[string]*topicState{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("schema: read %s: watch closed", topic)
			}
			if e == nil {
				t := topics[topic]
				if t == nil {
					t = &topicState{versions: map[int]*entry{}}
				}
				return t, nil
			}
			applyEntry(topics, r.log, e.Key(), e.Value(), e.Revision(), e.Operation() != natsjs.KeyValuePut)
		}
	}
}

func (r *Registry) state(topic string) *topicState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.topics[topic]
}

// Get returns version n of topic's schema, deleted or not (see Version.Deleted). The error
// wraps ErrVersionNotFound when there is no such version.
func (r *Registry) Get(ctx context.Context, topic string, n int) (*Version, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t := r.topics[topic]; t != nil {
		if e := t.versions[n]; e != nil {
			return e.v.clone(), nil
		}
	}
	return nil, fmt.Errorf("%w: %s v%d", ErrVersionNotFound, topic, n)
}

// Latest returns the highest live version of topic's schema, or an error wrapping ErrNoSchema.
func (r *Registry) Latest(ctx context.Context, topic string) (*Version, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t := r.topics[topic]; t != nil {
		if e := t.latest(); e != nil {
			return e.v.clone(), nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNoSchema, topic)
}

// List returns the live versions of topic's schema, oldest first (none: an empty list).
func (r *Registry) List(ctx context.Context, topic string) ([]*Version, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Version
	if t := r.topics[topic]; t != nil {
		for _, e := range t.live() {
			out = append(out, e.v.clone())
		}
	}
	return out, nil
}

// Topics returns the topics that have at least one live version, sorted.
func (r *Registry) Topics(ctx context.Context) ([]string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for name, t := range r.topics {
		if t.latest() != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Delete soft-deletes version n of topic: it stays readable with Get and its upcaster still
// applies, but it is no longer the latest, nor checked against, nor used for publishes.
// Deleting a deleted version is a no-op. Version numbers are never reused.
func (r *Registry) Delete(ctx context.Context, topic string, n int) error {
	if r.isClosed() {
		return errRegistryClosed
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return err
	}
	for attempt := 0; attempt < 20; attempt++ {
		e, err := r.kv.Get(ctx, versionKey(topic, n))
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s v%d", ErrVersionNotFound, topic, n)
		}
		if err != nil {
			return fmt.Errorf("schema: delete %s v%d: %w", topic, n, retry.Opaque(err))
		}
		var v Version
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return fmt.Errorf("schema: delete %s v%d: malformed record: %v", topic, n, err)
		}
		if v.Deleted {
			return nil
		}
		v.Deleted = true
		data, err := json.Marshal(&v)
		if err != nil {
			return err
		}
		rev, err := r.kv.Update(ctx, versionKey(topic, n), data, e.Revision())
		if err != nil {
			var apiErr *natsjs.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence {
				continue
			}
			return fmt.Errorf("schema: delete %s v%d: %w", topic, n, retry.Opaque(err))
		}
		r.apply(versionKey(topic, n), data, rev, false)
		return nil
	}
	return fmt.Errorf("schema: delete %s v%d: too many concurrent updates", topic, n)
}

// SetMode sets the compatibility mode (and, when p is not "", the policy) that new versions
// of topic are checked under. ModeNone disables checks.
func (r *Registry) SetMode(ctx context.Context, topic string, m Mode, p Policy) error {
	if r.isClosed() {
		return errRegistryClosed
	}
	if err := jetbus.ValidateTopic(topic); err != nil {
		return err
	}
	mode, err := ParseMode(string(m))
	if err != nil {
		return err
	}
	if p != "" {
		if p, err = ParsePolicy(string(p)); err != nil {
			return err
		}
	}
	data, _ := json.Marshal(topicConfig{Mode: mode, Policy: p})
	rev, err := r.kv.Put(ctx, configKey(topic), data)
	if err != nil {
		return fmt.Errorf("schema: set mode of %s: %w", topic, retry.Opaque(err))
	}
	r.apply(configKey(topic), data, rev, false)
	return nil
}

// Mode returns the mode and policy new versions of topic are checked under.
func (r *Registry) Mode(ctx context.Context, topic string) (Mode, Policy, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return "", "", err
	}
	m, p := r.opt.mode, r.opt.policy
	if t := r.state(topic); t != nil {
		r.mu.RLock()
		c := t.config
		r.mu.RUnlock()
		if c.Mode != "" {
			m = c.Mode
		}
		if c.Policy != "" {
			p = c.Policy
		}
	}
	return m, p, nil
}

// Validate validates payload against version n of topic's schema (0: the latest). It returns
// nil, a *ValidationError (ErrInvalid), or an error wrapping ErrNoSchema or
// ErrVersionNotFound.
func (r *Registry) Validate(ctx context.Context, topic string, n int, payload []byte) error {
	e, err := r.entryFor(topic, n)
	if err != nil {
		return err
	}
	val, err := e.validator()
	if err != nil {
		return err
	}
	return val.Validate(payload)
}

func (r *Registry) entryFor(topic string, n int) (*entry, error) {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.topics[topic]
	if t == nil || t.latest() == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoSchema, topic)
	}
	if n == 0 {
		return t.latest(), nil
	}
	e := t.versions[n]
	if e == nil {
		return nil, fmt.Errorf("%w: %s v%d", ErrVersionNotFound, topic, n)
	}
	return e, nil
}
