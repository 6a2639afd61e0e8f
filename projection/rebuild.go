package projection

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/partition"
)

// RebuildOptions tunes Rebuild. The zero value is usable.
type RebuildOptions struct {
	// Progress, if set, is called about twice a second with the rebuild's progress, and once
	// more when it switched.
	Progress func(RebuildProgress)
	// Handover is how long, after the switch, the rebuild keeps writing the new generation
	// while it waits for a running projector (`projector run`) to join the new group and
	// take its partitions over (default 30s). Without a running projector the new
	// generation stops being updated when the rebuild ends, until one starts.
	Handover time.Duration
	// Grace is how long after the switch the previous generation's collections, consumers and
	// checkpoints are removed (default 10s): readers that resolved the old collection just
	// before the switch still read a complete view meanwhile. Readers cache the live
	// collection for at most a second.
	Grace time.Duration
	// KeepPrevious keeps the previous generation instead of removing it.
	KeepPrevious bool
}

// Rebuild rebuilds changelog projection cfg from the earliest event into a new generation
// while the live one keeps serving, and switches readers to it when it has caught up:
//
//  1. It takes the rebuild lock in jetbus_projections (ErrRebuildRunning when another
//     rebuild holds it and recorded progress within RebuildLockTTL).
//  2. Generation N+1 consumes the topic from the earliest event as group "<name>-g<N+1>"
//     into "<collection>-g<N+1>" (and its history), exactly as the live projection does,
//     recording its progress (events done and total, rate, ETA) in the live document about
//     every second, which every running projector exports as metrics.
//  3. Once it has caught up — its lag reached zero, or, while events keep coming (when
//     neither generation's lag stays zero long enough to be seen, each having a batch in
//     flight), it has written every event the live generation, being written, had written
//     when it looked — one conditional write of the live document switches every reader to
//     it (ErrGenerationMoved when the live generation changed meanwhile). Running projectors
//     follow within a second.
//  4. It keeps writing until a running projector joined the new group (or Handover passed),
//     then leaves it; after Grace it removes the previous generation (unless KeepPrevious).
//
// It returns the new live generation. ctx ends it early: before the switch nothing changes
// for readers (a later rebuild starts over); after it, the previous generation is removed by
// the next rebuild.
func Rebuild(ctx context.Context, bus Bus, client *mongo.Client, dl DeadLetters, cfg Config, ro RebuildOptions, opts ...Option) (*Live, error) {
	c, err := NewChangelog(bus, client, dl, cfg, opts...)
	if err != nil {
		return nil, err
	}
	if ro.Handover <= 0 {
		ro.Handover = 30 * time.Second
	}
	if ro.Grace <= 0 {
		ro.Grace = 10 * time.Second
	}
	r := &rebuild{c: c, ro: ro, owner: owner()}
	return r.run(ctx)
}

type rebuild struct {
	c     *Changelog
	ro    RebuildOptions
	owner string
	prog  RebuildProgress
}

func owner() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%d", h, os.Getpid(), time.Now().UnixNano())
}

func (r *rebuild) run(ctx context.Context) (*Live, error) {
	c := r.c
	projections := c.db.Collection(ProjectionsCollection)
	var live *Live
	if err := c.retry(ctx, "read the live generation", func(ctx context.Context) error {
		var err error
		live, err = readLive(ctx, c.db, c.cfg.Name, c.cfg.Collection)
		return err
	}); err != nil {
		return nil, fmt.Errorf("projection: rebuild %s: %w", c.cfg.Name, retry.Opaque(err))
	}
	gen := live.Generation + 1
	now := time.Now().UTC().Truncate(time.Millisecond)
	r.prog = RebuildProgress{Generation: gen, Collection: GenerationCollection(c.cfg.Collection, gen),
		Group: GenerationGroup(c.cfg.Name, gen), Owner: r.owner, Started: now, Updated: now}
	if err := r.lock(ctx, projections); err != nil {
		return nil, err
	}
	log := c.set.log.With("projection", c.cfg.Name, "generation", gen)
	log.Info("rebuild started", "collection", r.prog.Collection, "group", r.prog.Group, "live", live.Generation)
	released := false
	defer func() {
		if !released {
			r.unlock(projections)
		}
	}()
	if live.Previous != nil && !r.ro.KeepPrevious && time.Now().After(live.Previous.Until) {
		if err := r.remove(ctx, live.Previous.Collection, live.Previous.Group); err != nil {
			log.Warn("removing a previous generation failed; the next rebuild tries again", "err", err)
		}
	}
	// Start from nothing: whatever an interrupted rebuild of this generation left, its
	// consumers included, so the new group's consumers start at the earliest event.
	if err := r.remove(ctx, r.prog.Collection, r.prog.Group); err != nil {
		return nil, fmt.Errorf("projection: rebuild %s: clear generation %d: %w", c.cfg.Name, gen, retry.Opaque(err))
	}
	v := c.newView(r.prog.Group, r.prog.Collection)
	if err := c.retry(ctx, "create indexes", v.ensureIndexes); err != nil {
		return nil, fmt.Errorf("projection: rebuild %s: indexes: %w", c.cfg.Name, retry.Opaque(err))
	}
	eng := v.engine()
	ectx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	er := &engineRun{done: make(chan struct{})}
	go func() {
		er.err = eng.run(ectx)
		close(er.done)
	}()
	stop := func() error {
		stopEngine()
		<-er.done
		return er.err
	}

	if err := r.catchUp(ctx, projections, eng, er, live.Group); err != nil {
		_ = stop()
		return nil, err
	}
	switched := time.Now().UTC().Truncate(time.Millisecond)
	next := &Live{Name: c.cfg.Name, Generation: gen, Collection: r.prog.Collection, Group: r.prog.Group, Switched: switched,
		Previous: &Retired{Generation: live.Generation, Collection: live.Collection, Group: live.Group, Until: switched.Add(r.ro.Grace)}}
	res, err := projections.UpdateOne(ctx,
		bson.D{{Key: fieldID, Value: c.cfg.Name}, {Key: "generation", Value: live.Generation}, {Key: "rebuild.owner", Value: r.owner}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "generation", Value: gen}, {Key: "collection", Value: next.Collection},
			{Key: "group", Value: next.Group}, {Key: "switched", Value: switched}, {Key: "previous", Value: next.Previous}}},
			{Key: "$unset", Value: bson.D{{Key: "rebuild", Value: ""}}}})
	if err == nil && res.MatchedCount == 0 {
		err = ErrGenerationMoved
	}
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("projection: rebuild %s: switch: %w", c.cfg.Name, retry.Opaque(err))
	}
	released = true
	c.m.setGeneration(c.cfg.Name, gen)
	c.m.setRebuild(c.cfg.Name, nil)
	log.Info("rebuild switched readers", "collection", next.Collection, "group", next.Group)
	if r.ro.Progress != nil {
		r.ro.Progress(r.prog)
	}

	r.handover(ctx, eng, er, log)
	if err := stop(); err != nil {
		log.Warn("new generation's writer stopped with an error", "err", err)
	}
	if r.ro.KeepPrevious {
		return next, nil
	}
	select {
	case <-ctx.Done():
		return next, nil
	case <-time.After(time.Until(next.Previous.Until)):
	}
	if err := r.remove(ctx, live.Collection, live.Group); err != nil {
		log.Warn("removing the previous generation failed; the next rebuild tries again", "err", err)
		return next, nil
	}
	_, _ = projections.UpdateOne(ctx, bson.D{{Key: fieldID, Value: c.cfg.Name}, {Key: "generation", Value: gen}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "previous", Value: ""}}}})
	next.Previous = nil
	log.Info("previous generation removed", "collection", live.Collection, "group", live.Group)
	return next, nil
}

// lock records this rebuild in the live document unless another rebuild did and recorded
// progress within RebuildLockTTL.
func (r *rebuild) lock(ctx context.Context, projections *mongo.Collection) error {
	c := r.c
	stale := time.Now().Add(-RebuildLockTTL)
	_, err := projections.UpdateOne(ctx,
		bson.D{{Key: fieldID, Value: c.cfg.Name}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "rebuild", Value: nil}},
			bson.D{{Key: "rebuild.updated", Value: bson.D{{Key: "$lt", Value: stale}}}},
		}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "rebuild", Value: r.prog}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "generation", Value: 0}, {Key: "collection", Value: c.cfg.Collection}, {Key: "group", Value: c.cfg.Name}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("%w: %s", ErrRebuildRunning, c.cfg.Name)
	}
	if err != nil {
		return fmt.Errorf("projection: rebuild %s: lock: %w", c.cfg.Name, retry.Opaque(err))
	}
	return nil
}

// unlock removes this rebuild's record (it did not switch).
func (r *rebuild) unlock(projections *mongo.Collection) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = projections.UpdateOne(ctx, bson.D{{Key: fieldID, Value: r.c.cfg.Name}, {Key: "rebuild.owner", Value: r.owner}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "rebuild", Value: ""}}}})
	r.c.m.setRebuild(r.c.cfg.Name, nil)
}

// engineRun is the new generation's engine running: done is closed once it returned err.
// Both catchUp and the rebuild's stop read it, so an engine that ends by itself is seen by
// each (a channel holding its one result would give it to the first reader only).
type engineRun struct {
	done chan struct{}
	err  error
}

// catchUp waits until the new generation has caught up, recording its progress meanwhile.
// It has caught up when its lag is zero, or, while events keep coming (each generation then
// has a batch in flight nearly all the time, and its lag is seldom zero), when it has written
// every event the live generation had written when it looked, the live one being written
// (reachedLive).
func (r *rebuild) catchUp(ctx context.Context, projections *mongo.Collection, eng *engine, er *engineRun, liveGroup string) error {
	c := r.c
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var (
		lastDone uint64
		lastAt   = time.Now()
		recorded time.Time
		rate     float64
		haveRate bool
		liveWas  map[string][]uint64 // the live generation's ack floors at the previous look
	)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("projection: rebuild %s: %w", c.cfg.Name, ctx.Err())
		case <-er.done:
			err := er.err
			if err == nil && ctx.Err() != nil {
				err = ctx.Err() // stopped by ctx, which this select saw second
			} else if err == nil {
				err = jetbus.ErrClosed
			}
			return fmt.Errorf("projection: rebuild %s: %w", c.cfg.Name, err)
		case <-tick.C:
		}
		// The lag first: every event it no longer holds was counted in settled before its
		// acknowledgement left, so done read after it includes them all.
		lag, known := r.lag(ctx)
		if !known {
			continue
		}
		done := eng.settled.Load()
		now := time.Now()
		if dt := now.Sub(lastAt).Seconds(); dt > 0 {
			inst := float64(done-lastDone) / dt
			if haveRate {
				rate = 0.7*rate + 0.3*inst
			} else {
				rate, haveRate = inst, true
			}
		}
		lastDone, lastAt = done, now
		caughtUp := lag == 0
		if !caughtUp && haveRate && float64(lag) <= rate {
			// Less than a second of writing behind: it may have written all the live
			// generation has.
			if caughtUp, liveWas = r.reachedLive(ctx, liveGroup, liveWas); caughtUp {
				if l, ok := r.lag(ctx); ok {
					lag = l
				}
				done = eng.settled.Load()
			}
		}
		r.prog.Done, r.prog.Total, r.prog.Rate = done, done+lag, rate
		r.prog.ETA = 0
		if lag > 0 && rate > 0 {
			r.prog.ETA = time.Duration(float64(lag) / rate * float64(time.Second)).Round(time.Second)
		}
		r.prog.CaughtUp = caughtUp
		r.prog.Updated = now.UTC().Truncate(time.Millisecond)
		c.m.setRebuild(c.cfg.Name, &r.prog)
		if r.ro.Progress != nil {
			r.ro.Progress(r.prog)
		}
		if r.prog.CaughtUp || now.Sub(recorded) >= time.Second {
			recorded = now
			res, err := projections.UpdateOne(ctx, bson.D{{Key: fieldID, Value: c.cfg.Name}, {Key: "rebuild.owner", Value: r.owner}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "rebuild", Value: r.prog}}}})
			if err == nil && res.MatchedCount == 0 {
				return fmt.Errorf("%w: %s: another rebuild took the lock over", ErrRebuildRunning, c.cfg.Name)
			}
		}
		if r.prog.CaughtUp {
			return nil
		}
	}
}

// lag reads the new generation's lag, which is known only once every partition's consumer
// exists.
func (r *rebuild) lag(ctx context.Context) (uint64, bool) {
	c := r.c
	var lag uint64
	for _, t := range c.cfg.topics() {
		cur, err := c.bus.Cursor(ctx, t, r.prog.Group)
		n, perr := c.bus.Partitions(ctx, t)
		if err != nil || perr != nil || len(cur.Partitions) < n {
			return 0, false
		}
		lag += cur.Lag()
	}
	return lag, true
}

// reachedLiveWait bounds how long reachedLive waits for the new generation's writes in
// flight.
const reachedLiveWait = time.Second

// reachedLive reports whether the new generation has written every event the live
// generation (group liveGroup) has written, while the live one is being written: in every
// partition the live generation has finished every event, or its ack floor moved since the
// previous look (was, which it returns updated). A live generation that stands still behind
// (no projector runs it) is no measure: then only a zero lag is. When the new generation has
// been delivered every event the live one has written, it waits up to reachedLiveWait for its
// own writes in flight to reach the live ack floors read.
func (r *rebuild) reachedLive(ctx context.Context, liveGroup string, was map[string][]uint64) (bool, map[string][]uint64) {
	c := r.c
	floors := map[string][]uint64{}
	moving, moved := true, false
	for _, t := range c.cfg.topics() {
		n, err := c.bus.Partitions(ctx, t)
		if err != nil {
			return false, nil
		}
		lc, err := c.bus.Cursor(ctx, t, liveGroup)
		if err != nil || len(lc.Partitions) < n {
			return false, nil // not consumed everywhere
		}
		floors[t] = make([]uint64, n)
		for _, p := range lc.Partitions {
			if p.Partition >= n {
				return false, nil
			}
			floors[t][p.Partition] = p.AckFloor
			finished := p.Pending == 0 && p.AckPending == 0
			advanced := p.Partition < len(was[t]) && p.AckFloor > was[t][p.Partition]
			if !finished && !advanced {
				moving = false
			}
			moved = moved || advanced
		}
	}
	// A live generation with nothing left to write is no measure either: with no events
	// coming, the zero lag comes, and the switch waits for it (its counts then whole).
	if !moved {
		moving = false
	}
	if !moving {
		return false, floors
	}
	deadline := time.Now().Add(reachedLiveWait)
	for first := true; ; first = false {
		reached := true
		for _, t := range c.cfg.topics() {
			cur, err := c.bus.Cursor(ctx, t, r.prog.Group)
			if err != nil || len(cur.Partitions) < len(floors[t]) {
				return false, floors
			}
			for _, p := range cur.Partitions {
				if p.Partition >= len(floors[t]) {
					continue
				}
				if first && p.Delivered < floors[t][p.Partition] {
					return false, floors // not near yet: no waiting
				}
				if p.AckFloor < floors[t][p.Partition] {
					reached = false
				}
			}
		}
		if reached {
			return true, floors
		}
		if time.Now().After(deadline) {
			return false, floors
		}
		select {
		case <-ctx.Done():
			return false, floors
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// handover keeps the new generation's writer until another member joined its group, or
// Handover passed, or the writer ended by itself.
func (r *rebuild) handover(ctx context.Context, eng *engine, er *engineRun, log interface{ Info(string, ...any) }) {
	c := r.c
	deadline := time.After(r.ro.Handover)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-er.done:
			return // the caller logs why
		case <-deadline:
			log.Info("no running projector joined the new generation; it is updated again when one starts")
			return
		case <-tick.C:
		}
		st, err := partition.Status(ctx, c.bus.JetStream(), c.cfg.Topic, r.prog.Group)
		if err != nil {
			continue
		}
		mine := eng.memberIDs()
		for _, m := range st.Members {
			if !mine[m.ID] {
				log.Info("a running projector joined the new generation; handing it over", "member", m.ID)
				return
			}
		}
	}
}

// remove drops a generation's collections and its group's consumers, checkpoints and
// membership bucket.
func (r *rebuild) remove(ctx context.Context, collection, group string) error {
	c := r.c
	if err := c.db.Collection(collection).Drop(ctx); err != nil {
		return err
	}
	if err := c.db.Collection(HistoryCollection(collection)).Drop(ctx); err != nil {
		return err
	}
	prefix := bson.Regex{Pattern: "^" + regexp.QuoteMeta(group+"/")}
	if _, err := c.db.Collection(CheckpointsCollection).DeleteMany(ctx, bson.D{{Key: fieldID, Value: prefix}}); err != nil {
		return err
	}
	js := c.bus.JetStream()
	for _, t := range c.cfg.topics() {
		n, err := c.bus.Partitions(ctx, t)
		if err != nil {
			return err
		}
		for p := range n {
			err := js.DeleteConsumer(ctx, jetbus.StreamName(t), jetbus.ConsumerName(group, p))
			if err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
				return err
			}
		}
		if kv, err := js.KeyValue(ctx, partition.AssignmentsBucket); err == nil {
			_ = kv.Delete(ctx, partition.AssignmentKey(t, group))
		}
	}
	if err := js.DeleteKeyValue(ctx, partition.GroupBucket(group)); err != nil && !errors.Is(err, natsjs.ErrBucketNotFound) {
		return err
	}
	return nil
}
