package projection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/retry"
)

// TxHandler applies one event inside its batch's transaction. ctx carries the transaction's
// session: pass it to every MongoDB call that must commit with the event (any collection of
// the client's deployment). Several events share a transaction, in stream order.
//
// An error aborts the transaction. jetbus.Permanent(err) dead-letters the event at once
// (reason "projection"); another error is retried, the batch's events delivered again in the
// same order, and dead-letters the event after MaxAttempts failures. A MongoDB error labelled
// TransientTransactionError (a write conflict, a failover) retries the transaction without
// counting against the event.
type TxHandler func(ctx context.Context, d *jetbus.Delivery) error

// Transactional is a transactional projection: a Go handler's writes and the partition's
// checkpoint commit in one MongoDB transaction, so each event takes effect exactly once. The
// checkpoint update is conditional on the checkpoint the batch started from: an owner that
// lost its partition (a zombie) fails its commit (ErrFenced) instead of applying events twice,
// and events at or below the checkpoint are acknowledged without calling the handler. It is a
// process component, like Changelog.
type Transactional struct {
	cfg    Config
	bus    Bus
	client *mongo.Client
	cps    *mongo.Collection
	owners *mongo.Collection
	dl     DeadLetters
	set    settings
	m      *metrics
	h      TxHandler

	mu  sync.Mutex
	eng *engine
}

// NewTransactional returns the transactional projection of cfg (Collection unused) calling h.
// The checkpoints live in cfg.Database; the deployment must support transactions (a replica
// set).
//
// Options: WithLogger, WithRegisterer, WithMiddlewares, WithTracerProvider.
//
// Errors: jetbus.ErrInvalidTopic, jetbus.ErrInvalidGroup and ErrInvalidConfig.
func NewTransactional(bus Bus, client *mongo.Client, dl DeadLetters, h TxHandler, cfg Config, opts ...Option) (*Transactional, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if bus == nil || client == nil || dl == nil || h == nil {
		return nil, fmt.Errorf("%w: nil Bus, MongoDB client, DeadLetters or handler", ErrInvalidConfig)
	}
	set, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if set.writeModels != nil {
		return nil, fmt.Errorf("%w: WithWriteModels is for changelog projections", ErrInvalidConfig)
	}
	m, err := newMetrics(set.reg)
	if err != nil {
		return nil, err
	}
	m.seed(cfg.Name)
	m.seedFenced(cfg.Name)
	db := client.Database(cfg.Database)
	return &Transactional{cfg: cfg, bus: bus, client: client, cps: db.Collection(CheckpointsCollection),
		owners: db.Collection(OwnersCollection), dl: dl, set: set, m: m, h: h}, nil
}

// Name is the component's name: "projection/<name>".
func (t *Transactional) Name() string { return "projection/" + t.cfg.Name }

// Ready reports whether the projection consumes its topic.
func (t *Transactional) Ready(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.eng == nil {
		return errors.New("not consuming yet")
	}
	return nil
}

// Status describes the projection for /v1/ops/status.
func (t *Transactional) Status(context.Context) (any, error) {
	t.mu.Lock()
	eng := t.eng
	t.mu.Unlock()
	return status(t.cfg, nil, eng), nil
}

// Run runs the projection as one replica of its group (cfg.Name) until ctx is done.
func (t *Transactional) Run(ctx context.Context) error {
	eng := &engine{name: t.cfg.Name, group: t.cfg.Name, cfg: t.cfg, bus: t.bus, dl: t.dl, log: t.set.log, m: t.m, mws: t.set.mws, s: t, waitHook: t.set.waitHook,
		tracer: t.set.tracer, target: writeTarget(t.cfg.Database, "", "commitTransaction")}
	t.mu.Lock()
	t.eng = eng
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.eng = nil
		t.mu.Unlock()
	}()
	return eng.run(ctx)
}

var _ strategy = (*Transactional)(nil)

// txPart is a transactional projection's state of a partition it owns (partState.state).
type txPart struct {
	cp   *checkpoint    // the partition's checkpoint as last read or written
	sess *mongo.Session // the session of this ownership's transactions
}

// txPartOf returns what open kept of ps (nil when open failed).
func txPartOf(ps *partState) *txPart {
	tp, _ := ps.state.(*txPart)
	return tp
}

// decode implements strategy: the handler takes the delivery as it is.
func (t *Transactional) decode(*entry) {}

// open implements strategy. It takes a partition this replica starts to own: it aborts the transaction a previous
// owner that died may have left open (killSessions on the session recorded in
// jetbus_owners: otherwise its locks hold the checkpoint until the transaction lifetime
// ends), records its own session there, and reads the checkpoint.
func (t *Transactional) open(ctx context.Context, ps *partState) error {
	id := CheckpointID(t.cfg.Name, ps.topic, ps.p)
	var prev struct {
		LSID bson.Raw `bson:"lsid"`
	}
	err := t.owners.FindOne(ctx, bson.D{{Key: fieldID, Value: id}}).Decode(&prev)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return err
	default:
		kill := bson.D{{Key: "killSessions", Value: bson.A{prev.LSID}}}
		if err := t.client.Database("admin").RunCommand(ctx, kill).Err(); err != nil {
			t.set.log.Warn("could not kill the previous owner's session; its open transaction ends with the transaction lifetime", "projection", t.cfg.Name, "partition", ps.p, "err", err)
		}
	}
	sess, err := t.client.StartSession()
	if err != nil {
		return err
	}
	_, err = t.owners.UpdateOne(ctx, bson.D{{Key: fieldID, Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lsid", Value: sess.ID()}, {Key: "ts", Value: time.Now().UTC()}}}},
		options.UpdateOne().SetUpsert(true))
	var cp *checkpoint
	if err == nil {
		cp, err = readCheckpoint(ctx, t.cps, id)
	}
	if err != nil {
		sess.EndSession(ctx)
		return err
	}
	ps.state = &txPart{cp: cp, sess: sess}
	return nil
}

// close implements strategy. It releases a partition this replica owned: its session record
// is removed (the next owner has no transaction to abort) and the session ended.
func (t *Transactional) close(ps *partState) {
	tp := txPartOf(ps)
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = t.owners.DeleteOne(ctx, bson.D{{Key: fieldID, Value: CheckpointID(t.cfg.Name, ps.topic, ps.p)}, {Key: "lsid", Value: tp.sess.ID()}})
	tp.sess.EndSession(ctx)
}

// apply implements strategy. It commits one batch: events at or below the checkpoint are
// skipped; the others go through the handler in one transaction that also moves the
// checkpoint. The handler's failures of each event are counted across retries of the batch
// (b.memo).
func (t *Transactional) apply(ctx context.Context, ps *partState, b *batch) error {
	tp := txPartOf(ps)
	fails, _ := b.memo.(map[*entry]int)
	if fails == nil {
		fails = map[*entry]int{}
		b.memo = fails
	}
	for {
		var todo []*entry
		var last uint64
		for _, en := range b.entries {
			last = max(last, en.d.Seq)
			switch {
			case en.d.Seq <= tp.cp.seq:
				if en.out != outDeadLetter {
					en.out = outSkipped
				}
			case en.noop || en.out == outDeadLetter:
			default:
				todo = append(todo, en)
			}
		}
		if last <= tp.cp.seq {
			return nil // another owner applied all of it
		}
		err := t.commit(ctx, tp.sess, tp.cp, todo, last)
		switch {
		case err == nil:
			for _, en := range todo {
				en.out = outWritten
			}
			return nil
		case errors.Is(err, ErrFenced):
			t.m.fence(t.cfg.Name)
			t.set.log.Warn("transactional commit fenced: another owner moved the checkpoint; reloading it", "projection", t.cfg.Name, "partition", ps.p, "checkpoint", tp.cp.seq)
			cp, rerr := readCheckpoint(ctx, t.cps, tp.cp.id)
			if rerr != nil {
				return rerr
			}
			tp.cp = cp
			continue
		}
		var hf *handlerFailure
		if !errors.As(err, &hf) {
			return err
		}
		en := hf.en
		fails[en]++
		if !jetbus.IsPermanent(hf.err) && fails[en] < t.cfg.maxAttempts() {
			return err // the engine retries the batch after a backoff
		}
		// Dead-letter it now: the next commit moves the checkpoint past it.
		seq, derr := t.dl.DeadLetter(en.traced(ctx), en.d, dlq.ReasonProjection, hf.err)
		if derr != nil {
			return derr
		}
		en.deadLetter(hf.err)
		en.dlqSeq = seq
		t.set.log.Info("event dead-lettered", "projection", t.cfg.Name, "id", en.d.ID, "seq", en.d.Seq, "attempts", fails[en], "err", hf.err)
	}
}

// handlerFailure is a handler's error (not a transient transaction error) for event en.
type handlerFailure struct {
	en  *entry
	err error
}

func (h *handlerFailure) Error() string {
	return fmt.Sprintf("handler failed on event %s (seq %d): %v", h.en.d.ID, h.en.d.Seq, h.err)
}
func (h *handlerFailure) Unwrap() error { return h.err }

// commit runs one transaction: the checkpoint moves from cp.seq to last (conditionally: it
// fails with ErrFenced when the stored checkpoint is not cp.seq), then the handler applies
// todo. A transient transaction error runs it again; an unknown commit result retries the
// commit. On success cp is last.
func (t *Transactional) commit(ctx context.Context, sess *mongo.Session, cp *checkpoint, todo []*entry, last uint64) error {
	bo := retry.Backoff{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		t0 := time.Now()
		err := t.once(ctx, sess, cp, todo, last)
		t.m.writeSeconds(t.cfg.Name, time.Since(t0).Seconds())
		if err == nil {
			cp.seq, cp.exists = last, true
			return nil
		}
		if hasLabel(err, "TransientTransactionError") && ctx.Err() == nil {
			// A write conflict or a failover: the whole transaction again, after a short
			// pause that lets the transaction holding the documents commit.
			if bo.Wait(ctx.Done()) {
				continue
			}
		}
		return err
	}
}

func (t *Transactional) once(ctx context.Context, sess *mongo.Session, cp *checkpoint, todo []*entry, last uint64) error {
	if err := sess.StartTransaction(); err != nil {
		return err
	}
	sctx := mongo.NewSessionContext(ctx, sess)
	abort := func(err error) error {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = sess.AbortTransaction(actx)
		return err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if cp.exists {
		res, err := t.cps.UpdateOne(sctx, bson.D{{Key: fieldID, Value: cp.id}, {Key: "seq", Value: int64(cp.seq)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "seq", Value: int64(last)}, {Key: "ts", Value: now}}}})
		if err != nil {
			return abort(err)
		}
		if res.MatchedCount == 0 {
			return abort(fmt.Errorf("%w (%s was at %d)", ErrFenced, cp.id, cp.seq))
		}
	} else {
		_, err := t.cps.InsertOne(sctx, bson.D{{Key: fieldID, Value: cp.id}, {Key: "seq", Value: int64(last)}, {Key: "ts", Value: now}})
		if mongo.IsDuplicateKeyError(err) {
			return abort(fmt.Errorf("%w (%s was created meanwhile)", ErrFenced, cp.id))
		}
		if err != nil {
			return abort(err)
		}
	}
	for _, en := range todo {
		// The handler runs in its event's trace: what it does for the event (an outbox
		// document with the event's traceparent, its own spans) follows the event.
		if err := t.call(en.traced(sctx), en.d); err != nil {
			if retry.Transient(err) && !jetbus.IsPermanent(err) {
				return abort(err) // MongoDB's, not the event's
			}
			return abort(&handlerFailure{en: en, err: err})
		}
	}
	for {
		err := sess.CommitTransaction(ctx)
		if err == nil {
			return nil
		}
		if hasLabel(err, "UnknownTransactionCommitResult") && ctx.Err() == nil {
			continue // committing again is safe: MongoDB commits a transaction once
		}
		// A commit that timed out (ctx ended; possibly never sent) leaves the transaction
		// open on the server, holding its documents — the checkpoint, the handler's
		// counters — until the transaction lifetime (60 s by default), and this session in
		// a transaction the driver will not start another over. Abort it. (After a commit
		// the driver counts as done, the abort is refused without a round trip; a commit
		// that did go through makes the next attempt find the checkpoint moved: ErrFenced.)
		return abort(err)
	}
}

// call runs the handler, turning a panic into an error.
func (t *Transactional) call(ctx context.Context, d *jetbus.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return t.h(ctx, d)
}

func hasLabel(err error, label string) bool {
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel(label)
}
