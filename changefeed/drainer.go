package changefeed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/partition"
)

// After modes of an outbox: what a drainer does with a document once its event is stored.
const (
	// OutboxDelete deletes the document (the default).
	OutboxDelete = "delete"
	// OutboxMark sets sent: <date> on it; a TTL index on sent removes it after Retention.
	OutboxMark = "mark"
)

// Defaults of OutboxConfig.
const (
	DefaultRetention = 24 * time.Hour
	DefaultAfter     = OutboxDelete
	// settleBatch is how many published documents a drainer deletes (or marks) at once.
	settleBatch = 256
)

// OutboxConfig configures one outbox drainer. The zero value of every field but Name,
// Database and Collection is a usable default.
type OutboxConfig struct {
	// Name names the drainer: its lease. [a-z0-9][a-z0-9_-]{0,63}.
	Name string
	// Database and Collection are the outbox collection.
	Database, Collection string
	// After is OutboxDelete (default) or OutboxMark.
	After string
	// Retention is how long sent documents are kept with OutboxMark (default
	// DefaultRetention, at least a second).
	Retention time.Duration
	// Topics are the topics its documents may name (empty: any). A document naming another
	// is dead-lettered with reason changefeed, and the drainer moves on: whoever can write
	// the outbox collection can publish only there.
	Topics []string
	// MaxInFlight bounds publishes awaiting acknowledgement (default DefaultMaxInFlight).
	MaxInFlight int
	// LeaseTTL, MemberID and Replicas as in Config.
	LeaseTTL time.Duration
	MemberID string
	Replicas int
}

// Validate reports whether c is usable. Its errors wrap ErrInvalidConfig and name the field.
func (c OutboxConfig) Validate() error {
	if !namePattern.MatchString(c.Name) {
		return fmt.Errorf("%w: Name %q must match %s", ErrInvalidConfig, c.Name, namePattern)
	}
	if c.Database == "" || c.Collection == "" {
		return fmt.Errorf("%w: Database and Collection are required", ErrInvalidConfig)
	}
	if err := validateNamespace(c.Database, c.Collection); err != nil {
		return err
	}
	switch c.After {
	case "", OutboxDelete, OutboxMark:
	default:
		return fmt.Errorf("%w: After %q must be %q or %q", ErrInvalidConfig, c.After, OutboxDelete, OutboxMark)
	}
	if c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Second) {
		return fmt.Errorf("%w: Retention must be at least 1s, got %s", ErrInvalidConfig, c.Retention)
	}
	return validateCommon(c.MaxInFlight, c.LeaseTTL, c.MemberID, c.Replicas, nil, 0)
}

func (c OutboxConfig) withDefaults() (OutboxConfig, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.After == "" {
		c.After = DefaultAfter
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = partition.DefaultTTL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c, nil
}

// Drainer publishes the documents of an outbox collection. It is a process component: Name,
// Run, Ready and Status. Every method is safe for concurrent use.
type Drainer struct {
	*runner
	cfg  OutboxConfig
	coll *mongo.Collection
}

// NewDrainer returns the drainer of the outbox cfg describes, publishing through bus. It
// opens the drainer's lease bucket. Options as New (a dead letter's group is
// "outbox-<name>", its reason dlq.ReasonChangefeed).
func NewDrainer(ctx context.Context, bus Publisher, client *mongo.Client, cfg OutboxConfig, opts ...Option) (*Drainer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o, log, m, err := prepare(bus, client, opts, "outbox", "outbox_", cfg.Name)
	if err != nil {
		return nil, err
	}
	lease, err := openLease(ctx, bus.JetStream(), "outbox", cfg.Name, cfg.MemberID, cfg.LeaseTTL, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	r := &runner{
		what: "outbox " + cfg.Name, log: log, metrics: m, lease: lease,
		// The topic comes from the document: a missing or bad topic is the document's fault.
		send:  &sender{bus: bus, dlq: o.dlq, by: "outbox-" + cfg.Name, source: "outbox." + cfg.Name, templated: true, log: log},
		state: runnerState{role: RoleStarting},
	}
	return &Drainer{runner: r, cfg: cfg, coll: client.Database(cfg.Database).Collection(cfg.Collection)}, nil
}

// Name returns "outbox/<name>", the component's name.
func (d *Drainer) Name() string { return "outbox/" + d.cfg.Name }

// Run runs the drainer until ctx ends: a hot standby while another runner holds its lease,
// the active drainer once it takes it. On ctx's end it stops reading, waits for the
// publishes in flight, settles their documents and releases the lease; it returns nil then.
func (d *Drainer) Run(ctx context.Context) error {
	d.loop(ctx, d.serve)
	return nil
}

// Ready reports whether the drainer does its job (see Feed.Ready).
func (d *Drainer) Ready(context.Context) error { return d.ready() }

// OutboxStatus is what /v1/ops/status shows of a drainer.
type OutboxStatus struct {
	Outbox       string `json:"outbox"`
	Role         string `json:"role"`
	Member       string `json:"member"`
	Owner        string `json:"owner,omitempty"`
	Namespace    string `json:"namespace"`
	After        string `json:"after"`
	Published    uint64 `json:"published"`
	DeadLettered uint64 `json:"dead_lettered"`
	Duplicates   uint64 `json:"duplicates"`
	// LastEvent is the ts of the last document published (active drainer).
	LastEvent time.Time `json:"last_event,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// Status reports the drainer's role and counts (a process.Statuser).
func (d *Drainer) Status(context.Context) (any, error) {
	s := d.snapshot()
	return OutboxStatus{
		Outbox: d.cfg.Name, Role: s.role, Member: d.lease.member(), Owner: s.owner,
		Namespace: d.cfg.Database + "." + d.cfg.Collection, After: d.cfg.After,
		Published: s.published, DeadLettered: s.deadLettered, Duplicates: s.duplicates, LastEvent: s.lastChange, Error: s.errorText(),
	}, nil
}

// serve drains the outbox while this drainer holds the lease. The outbox collection is its
// own position: every document still there (delete mode) or without sent (mark mode) is
// pending. So it opens the change stream first, publishes the pending documents, then the
// documents the stream reports inserted; an event published twice (found by the scan and
// by the stream, or again after a crash) has the same ID and is dropped by JetStream.
func (d *Drainer) serve(ctx context.Context) error {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	var rec *recovery
	for ctx.Err() == nil {
		err := d.drain(ctx, rec)
		rec = nil
		if ctx.Err() != nil {
			return nil
		}
		var we *windowError
		if errors.As(err, &we) {
			// Everything pending is published again; the first ones one at a time.
			rec = newRecovery(we.unsettled + d.cfg.MaxInFlight + settleBatch)
		}
		d.noteErr(err)
		d.log.Warn("outbox drain interrupted; starting again", "err", err)
		backoff.Wait(ctx.Done())
	}
	return nil
}

// drain runs one pass: indexes, stream opened, pending documents, then the stream.
func (d *Drainer) drain(ctx context.Context, rec *recovery) error {
	if err := d.ensureIndexes(ctx); err != nil {
		return err
	}
	cs, err := d.coll.Watch(ctx, mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "operationType", Value: "insert"}}}}},
		options.ChangeStream().SetMaxAwaitTime(maxAwait))
	if err != nil {
		return err
	}
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	s := &settler{d: d}
	w := newWindow(d.cfg.MaxInFlight, s.onDone)
	err = d.scan(ctx, w, rec)
	if err == nil && ctx.Err() == nil {
		d.progressed()
		err = d.tail(ctx, cs, w, rec)
	}
	if errors.Is(err, errWindowFailed) {
		err = nil
	}
	unsettled, werr := w.close()
	if ferr := s.flush(); ferr != nil && err == nil && werr == nil {
		err = ferr
	}
	if werr != nil {
		return &windowError{err: werr, unsettled: unsettled}
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ensureIndexes creates the index pending documents are read in order by, and in mark mode
// the TTL index that removes sent documents.
func (d *Drainer) ensureIndexes(ctx context.Context) error {
	models := []mongo.IndexModel{{Keys: bson.D{{Key: OutboxTS, Value: 1}, {Key: OutboxID, Value: 1}}}}
	if d.cfg.After == OutboxMark {
		models = append(models, mongo.IndexModel{
			Keys:    bson.D{{Key: OutboxSent, Value: 1}},
			Options: options.Index().SetExpireAfterSeconds(int32(d.cfg.Retention / time.Second)),
		})
	}
	if _, err := d.coll.Indexes().CreateMany(ctx, models); err != nil {
		var se mongo.ServerError
		if errors.As(err, &se) && (se.HasErrorCode(85) || se.HasErrorCode(86)) {
			// IndexOptionsConflict / IndexKeySpecsConflict: an index the operator made, or
			// another retention; the drainer works with it.
			d.log.Warn("outbox index exists with other options; keeping it", "err", err)
			return nil
		}
		return err
	}
	return nil
}

// pendingFilter selects the documents not yet published.
func (d *Drainer) pendingFilter() bson.D {
	if d.cfg.After == OutboxMark {
		return bson.D{{Key: OutboxSent, Value: bson.D{{Key: "$exists", Value: false}}}}
	}
	return bson.D{}
}

// scan publishes the pending documents in (ts, _id) order.
func (d *Drainer) scan(ctx context.Context, w *window, rec *recovery) error {
	cur, err := d.coll.Find(ctx, d.pendingFilter(), options.Find().SetSort(bson.D{{Key: OutboxTS, Value: 1}, {Key: OutboxID, Value: 1}}))
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	return pump(ctx, w, d.send, rec, func(ctx context.Context) (*item, error) {
		if err := nextDocument(ctx, cur); err != nil {
			return nil, err
		}
		return d.item(ctx, cur.Current)
	})
}

// tail publishes the documents the change stream reports inserted.
func (d *Drainer) tail(ctx context.Context, cs *mongo.ChangeStream, w *window, rec *recovery) error {
	return pump(ctx, w, d.send, rec, func(ctx context.Context) (*item, error) {
		ok, err := nextChange(ctx, cs, "outbox's change stream")
		if err != nil {
			return nil, err
		}
		if !ok {
			// Quiet: let the settler flush what is acknowledged.
			return &item{e: &entry{step: step{kind: stepHeartbeat}}}, nil
		}
		doc, ok := cs.Current.Lookup("fullDocument").DocumentOK()
		if !ok {
			return nil, nil // an insert always has it; nothing to publish otherwise
		}
		return d.item(ctx, clone(doc))
	})
}

// item makes the item of one outbox document: its message, or, for a document that can
// never be published, its entry alone once it is dead-lettered. A document without a usable
// _id gives no item: it stays in the outbox, reported.
func (d *Drainer) item(ctx context.Context, doc bson.Raw) (*item, error) {
	idDoc, err := bson.Marshal(bson.D{{Key: OutboxID, Value: doc.Lookup(OutboxID)}})
	if err != nil {
		return nil, err
	}
	e := &entry{step: step{kind: stepChange, lastID: idDoc}}
	m, merr := outboxMessage(doc)
	if merr == nil && len(d.cfg.Topics) > 0 && !slices.Contains(d.cfg.Topics, m.topic) {
		merr = fmt.Errorf("%w: %s: topic %q is not one this outbox publishes to (%s)", ErrInvalidOutbox, m.id, m.topic, strings.Join(d.cfg.Topics, ", "))
	}
	e.step.key = m.key
	switch {
	case merr != nil && m.id == "":
		// Not even an ID: it can be neither published nor filed under one.
		d.log.Error("outbox document without a usable _id left in place", "err", merr)
		return nil, nil
	case merr != nil:
		if err := d.send.reject(ctx, m, merr); err != nil {
			return nil, err
		}
		e.step.rejected = true
	}
	if !m.ts.IsZero() {
		d.read(m.ts)
	}
	if e.step.rejected {
		return &item{e: e}, nil
	}
	return &item{e: e, m: m}, nil
}

// settler deletes (or marks) the documents whose events are stored, in batches; the window's
// acker calls onDone, in order.
type settler struct {
	d       *Drainer
	ids     bson.A
	lastRun time.Time
}

func (s *settler) onDone(e *entry) error {
	if e.step.kind == stepChange {
		s.d.counted(e.step.rejected, e.step.dup)
		s.ids = append(s.ids, bson.Raw(e.step.lastID).Lookup(OutboxID))
	}
	if len(s.ids) >= settleBatch || (len(s.ids) > 0 && (e.step.kind == stepHeartbeat || time.Since(s.lastRun) > 100*time.Millisecond)) {
		if err := s.flush(); err != nil {
			// The documents stay pending and are published again (dropped as duplicates).
			s.d.log.Warn("removing published outbox documents failed; they are published again later", "err", err)
			return err
		}
	}
	return nil
}

// flush deletes or marks the documents settled so far.
func (s *settler) flush() error {
	s.lastRun = time.Now()
	if len(s.ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	filter := bson.D{{Key: OutboxID, Value: bson.D{{Key: "$in", Value: s.ids}}}}
	var err error
	if s.d.cfg.After == OutboxMark {
		_, err = s.d.coll.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: OutboxSent, Value: bson.NewDateTimeFromTime(time.Now())}}}})
	} else {
		_, err = s.d.coll.DeleteMany(ctx, filter)
	}
	if err != nil {
		return err
	}
	s.ids = s.ids[:0]
	return nil
}
