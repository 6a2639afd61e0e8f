package changefeed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/internal/retry"
)

// saveTimeout bounds one write of the position.
const saveTimeout = 5 * time.Second

// windowError is a phase ended by a failed publish: unsettled entries were in flight after
// the last acknowledged one, and are published again one at a time (recovery).
type windowError struct {
	err       error
	unsettled int
}

func (e *windowError) Error() string { return e.err.Error() }
func (e *windowError) Unwrap() error { return e.err }

// errInvalidated ends a stream that MongoDB invalidated (the collection was dropped or
// renamed, the database dropped): the feed opens it again after the invalidate event, so it
// follows a collection created again under the name.
var errInvalidated = errors.New("changefeed: change stream invalidated")

// run is the active runner's state under one lease: its position in memory, at or ahead of
// the saved one. The serve goroutine owns it between phases; during a phase the window's
// acker goroutine advances it (onDone) and the reader only reads the configuration.
type run struct {
	f      *Feed
	pos    Position // Phase, At, Copy (LastID kept in lastID until saved), HistoryLost
	tok    bson.Raw // the position's resume token
	lastID bson.Raw // the copy's last acknowledged {"_id": …}
	ct     *ClusterTime
	rev    uint64

	dirty, changed bool // unsaved progress; of which changes (not only heartbeats)
	lastSave       time.Time

	next        Start     // the start mode of the next fresh position ("" : the feed's)
	historyLost time.Time // stamped onto the next fresh position
}

// serve runs the feed while this runner holds the lease (ctx ends when it must stop).
func (f *Feed) serve(ctx context.Context) error {
	r := &run{f: f}
	if err := r.load(ctx); err != nil {
		return err
	}
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	var rec *recovery
	for ctx.Err() == nil {
		var err error
		switch r.pos.Phase {
		case "":
			err = r.begin(ctx)
		case PhaseCopy:
			err = r.copy(ctx, rec)
		default:
			err = r.stream(ctx, rec)
		}
		rec = nil
		if ctx.Err() != nil {
			return nil
		}
		var we *windowError
		switch {
		case err == nil:
			f.progressed()
			backoff.Reset()
		case errors.Is(err, errInvalidated):
		case errors.Is(err, errPositionMoved):
			f.log.Warn("the saved position was changed by someone else; reading it again", "err", err)
			if err := r.load(ctx); err != nil {
				return err
			}
		case isHistoryLost(err):
			if err := r.historyGone(ctx, err); err != nil {
				return err
			}
		case errors.As(err, &we):
			rec = newRecovery(we.unsettled)
			f.noteErr(err)
			f.log.Warn("a publish failed; publishing again from the acknowledged position", "err", err, "in_flight", we.unsettled)
			backoff.Wait(ctx.Done())
		case isFatal(err):
			r.failAndWait(ctx, fmt.Errorf("%w: %v", ErrFeedFailed, err), f.cfg.FailedRetry)
		default:
			f.noteErr(err)
			f.log.Warn("feed interrupted; trying again", "err", err)
			backoff.Wait(ctx.Done())
		}
	}
	return nil
}

// load reads the saved position.
func (r *run) load(ctx context.Context) error {
	p, rev, err := r.f.pos.load(ctx, r.f.cfg.Name)
	if err != nil {
		return err
	}
	r.pos, r.rev, r.tok, r.lastID, r.ct = Position{}, rev, nil, nil, nil
	if p != nil {
		r.pos = *p
		if r.tok, err = decodeToken(p.Token); err != nil {
			return err
		}
		if p.Copy != nil {
			cp := *p.Copy
			r.pos.Copy = &cp
			if r.lastID, err = decodeToken(p.Copy.LastID); err != nil {
				return err
			}
		}
		r.ct = p.ClusterTime
	}
	r.f.update(func(s *runnerState) { s.saved = p })
	return nil
}

// save writes the position in memory with a compare-and-set on the revision last written.
func (r *run) save(ctx context.Context) error {
	p := r.pos
	var err error
	if p.Token, err = encodeToken(r.tok); err != nil {
		return err
	}
	p.ClusterTime = r.ct
	if p.Copy != nil {
		cp := *p.Copy
		if cp.LastID, err = encodeToken(r.lastID); err != nil {
			return err
		}
		p.Copy = &cp
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	rev, err := r.f.pos.save(ctx, r.f.cfg.Name, &p, r.rev)
	if err != nil {
		return err
	}
	r.rev, r.dirty, r.changed, r.lastSave = rev, false, false, time.Now()
	r.f.update(func(s *runnerState) { s.saved = &p })
	return nil
}

// onDone advances the position by one settled entry (the window's acker calls it, in order)
// and saves it every SaveInterval while changes flow, every Heartbeat while only heartbeats
// do.
func (r *run) onDone(e *entry) error {
	st := &e.step
	switch st.kind {
	case stepChange:
		r.tok, r.ct, r.dirty, r.changed = st.token, ctOf(st.clusterT), true, true
		r.f.counted(st.rejected, st.dup)
	case stepHeartbeat:
		if string(st.token) != string(r.tok) {
			r.tok, r.ct, r.dirty = st.token, tokenTime(st.token), true
		}
	case stepCopied:
		r.lastID, r.dirty, r.changed = st.lastID, true, true
		r.pos.Copy.Copied++
		r.f.counted(st.rejected, st.dup)
		if m := r.f.metrics; m != nil {
			inc(m.copied)
			set(m.copyProgress, r.pos.Copy.Progress())
		}
	case stepNamespace:
		r.pos.Copy.Done++
		r.lastID, r.dirty, r.changed = nil, true, true
	}
	every := r.f.cfg.Heartbeat
	if r.changed {
		every = r.f.cfg.SaveInterval
	}
	if !r.dirty || time.Since(r.lastSave) < every {
		return nil
	}
	err := r.save(context.Background())
	if errors.Is(err, errPositionMoved) {
		return err
	}
	if err != nil {
		r.f.log.Warn("saving the position failed; trying again later", "err", err)
	}
	return nil
}

func ctOf(v uint64) *ClusterTime {
	if v == 0 {
		return nil
	}
	return &ClusterTime{T: uint32(v >> 32), I: uint32(v)}
}

// begin starts a fresh position by the start mode (the feed's, or the history policy's) and
// saves it.
func (r *run) begin(ctx context.Context) error {
	start := r.next
	if start == "" {
		start = r.f.cfg.Start
	}
	p := Position{HistoryLost: r.historyLost}
	r.tok, r.lastID, r.ct = nil, nil, nil
	switch start {
	case StartLatest:
		tok, err := r.f.currentToken(ctx)
		if err != nil {
			return err
		}
		p.Phase, r.tok, r.ct = PhaseStream, tok, tokenTime(tok)
	case StartTimestamp:
		at := &ClusterTime{T: uint32(r.f.cfg.StartAt.Unix())}
		p.Phase, p.At = PhaseStream, at
	case StartCopyExisting:
		cp, err := r.f.newCopy(ctx)
		if err != nil {
			return err
		}
		p.Phase, p.Copy = PhaseCopy, cp
		if m := r.f.metrics; m != nil {
			set(m.copyProgress, cp.Progress())
		}
		r.f.log.Info("copy begins", "epoch", cp.Epoch, "collections", len(cp.Namespaces), "estimated_documents", cp.Total)
	}
	r.pos = p
	if err := r.save(ctx); err != nil {
		return err
	}
	r.next = ""
	return nil
}

// historyGone applies the feed's policy to a lost resume point.
func (r *run) historyGone(ctx context.Context, cause error) error {
	f := r.f
	if m := f.metrics; m != nil {
		inc(m.historyLost)
	}
	switch f.cfg.OnHistoryLost {
	case HistoryLatest, HistoryRecopy:
		r.next, r.historyLost = StartLatest, time.Now().UTC()
		what := "continuing with the latest changes; the changes in between are NOT published"
		if f.cfg.OnHistoryLost == HistoryRecopy {
			r.next, what = StartCopyExisting, "copying every document again, then streaming"
		}
		f.log.Error("the saved position is no longer in the oplog; "+what, "policy", f.cfg.OnHistoryLost, "err", cause)
		r.pos = Position{}
		return nil
	}
	err := fmt.Errorf("%w (policy fail; to start again by the feed's start mode, delete key %q of KV bucket %s): %v",
		ErrHistoryLost, f.cfg.Name, PositionBucket, cause)
	r.failAndWait(ctx, err, 0)
	return nil
}

// failAndWait keeps the feed failed with err — it holds the lease and publishes nothing —
// until its saved position is changed by someone else (then it reads it again), retryAfter
// passes (0: never), or ctx ends.
func (r *run) failAndWait(ctx context.Context, err error, retryAfter time.Duration) {
	f := r.f
	f.setFailed(err)
	defer f.setFailed(nil)
	f.log.Error("feed failed", "err", err, "retry_in", retryAfter)
	var deadline <-chan time.Time
	if retryAfter > 0 {
		t := time.NewTimer(retryAfter)
		defer t.Stop()
		deadline = t.C
	}
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		changed := make(chan error, 1)
		go func() { changed <- f.pos.waitChange(wctx, f.cfg.Name, r.rev) }()
		select {
		case <-ctx.Done():
			cancel()
			<-changed
			return
		case <-deadline:
			cancel()
			<-changed
			return
		case werr := <-changed:
			cancel()
			if werr == nil {
				f.log.Info("the saved position changed; starting again")
				if lerr := r.load(ctx); lerr != nil {
					f.log.Warn("reading the position failed", "err", lerr)
					continue
				}
				return
			}
			if ctx.Err() == nil {
				t := time.NewTimer(time.Second)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		}
	}
}

// MongoDB error codes a feed acts on.
const (
	codeHistoryLost        = 286 // ChangeStreamHistoryLost
	codeInvalidResumeToken = 260 // InvalidResumeToken
)

// isHistoryLost reports whether err says the resume point is gone.
func isHistoryLost(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(codeHistoryLost) || se.HasErrorCode(codeInvalidResumeToken))
}

// isFatal reports whether err is MongoDB refusing the stream for a reason retrying soon will
// not fix (a pipeline it rejects, a required image missing, a non-resumable stream error).
func isFatal(err error) bool {
	var se mongo.ServerError
	if errors.As(err, &se) {
		return !retry.Transient(err)
	}
	return errors.Is(err, mongo.ErrMissingResumeToken) || errors.Is(err, errMalformed)
}

// errMalformed marks a change or document the feed cannot read.
var errMalformed = errors.New("changefeed: malformed change")
