package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// Publisher is the publish path Replay republishes through (a jetbus.Bus).
type Publisher interface {
	Publish(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error)
}

// ReplayOptions selects and shapes a replay.
type ReplayOptions struct {
	Filter Filter
	// Transform, if set, returns the body to republish (e.g. a fixed or upcast payload).
	// Returning an error skips the letter and reports the error. It may be called from
	// several goroutines at once, for letters of different keys.
	Transform func(*Letter) (json.RawMessage, error)
	// Limit bounds how many letters are replayed (0: all).
	Limit int
	// DryRun reports what would be replayed and changes nothing.
	DryRun bool
	// Progress, if set, is called after each letter.
	Progress func(ReplayProgress)
	// OnLetter, if set, is called with each selected letter once it is handled, in the DLQ's
	// order, from the goroutine that called Replay: with the republished event, or with why
	// it was not replayed (it stays in the DLQ); in a dry run with neither.
	OnLetter func(l *Letter, ev *jetbus.Event, err error)
	// IngressTopics are the topics open to ingress now. A message ingress refused (a letter
	// of group "ingress") is replayed only to one of them, unless Force: ingress's allow
	// list is what let a client publish there at all, so a replay must not bypass it. Nil:
	// no such letter is replayed without Force.
	IngressTopics []string
	// Force replays ingress's refusals to any topic, bypassing IngressTopics.
	Force bool
}

// ReplayProgress reports a running replay or discard. Total is an estimate from above: the
// letters of the filter's topic left in the DLQ's streams read so far (other filters, and
// Limit, are applied as the letters are read); it grows when the scan reaches the next stream.
type ReplayProgress struct {
	Done, Total, Failed int
}

// ReplayReport is the outcome of Replay. It holds counts and a bounded sample of failures, not
// the letters: a replay of millions of letters holds one chunk of them at a time.
type ReplayReport struct {
	// Selected counts the letters the filter selected (in a dry run: the ones that would be
	// replayed).
	Selected int
	// Replayed counts letters republished and removed.
	Replayed int
	// FailedCount counts letters not replayed; they stay in the DLQ.
	FailedCount int
	// Failed maps the positions of the first MaxReportedFailures letters not replayed to why
	// (OnLetter sees every one).
	Failed map[Position]error
	// Last is the position of the last letter handled (zero: none).
	Last Position
	// Resume is where a later replay with the same filter (Filter.From) goes on without
	// skipping a letter this one did not replay: the first letter that failed, or else the
	// first one it did not reach (ctx ended, Limit, or ErrTooManyFailures). Zero when the
	// replay went through every letter without a failure.
	Resume Position
}

// Bounds of a replay: what it holds at once, whatever the number of letters.
const (
	// ReplayChunk letters (and at most replayChunkBytes of them) are replayed at a time.
	// With parking, the keys replayed are released once releaseBatch of them are waiting
	// (after the chunk that reached it) and at the end, even when the replay was
	// interrupted.
	ReplayChunk      = 1000
	replayChunkBytes = 4 << 20
	// replayWorkers replay letters of different keys at once within a chunk; the letters of
	// one topic and key (whatever their groups) are replayed one after the other, in order:
	// a lane. A failed letter holds back the later letters of its group, topic and key, all
	// in its lane, so what is held back never depends on the workers' timing.
	replayWorkers = 64
	// MaxBlockedKeys bounds the keys a replay remembers as failed (so as to hold their later
	// letters back, keeping their order). A failure of one more key stops the replay
	// (ErrTooManyFailures): fix the cause, or discard those letters, and replay again.
	MaxBlockedKeys = 100_000
	// MaxReportedFailures bounds ReplayReport.Failed.
	MaxReportedFailures = 100
)

// chunkLetters is ReplayChunk, a variable for the tests.
var chunkLetters = ReplayChunk

// maxBlockedKeys is MaxBlockedKeys, a variable for the tests.
var maxBlockedKeys = MaxBlockedKeys

// releaseBatch is how many replayed keys are checked for release at once (one scan of the
// DLQ's headers for all of them); with parking on. A variable for the tests.
var releaseBatch = 10_000

// ReplayID returns the event ID a letter is republished with: replaying the same letter
// again (for example after a crash between the republish and the removal) is dropped as a
// duplicate within the topic's duplicate window.
func ReplayID(l *Letter) string {
	if l.Rejected() {
		return replayPrefix + "rejected:" + l.OriginalID
	}
	return replayPrefix + l.OriginalStream + ":" + strconv.FormatUint(l.OriginalSeq, 10) + ":" + l.Group
}

// replayPrefix starts every replayed event's ID: only such events are looked up in
// ReplayBucket.
const replayPrefix = "replay:"

// ingressGroup is the group of the messages ingress refused (Rejected.By).
const ingressGroup = "ingress"

func replayKey(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// replayRecord is what ReplayBucket holds under a replayed event's ID: the group the event is
// meant for, and what Replay published under that ID. A delivery with the ID is skipped by the
// other groups only when it is that very event: same topic, same key, same body.
type replayRecord struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	Key   string `json:"key,omitempty"`
	// SHA256 is the hex SHA-256 of the body published.
	SHA256 string `json:"sha256"`
}

func bodySHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// recordReplay notes, before the republish, that the event with this ID and content is meant
// for group.
func (q *Queue) recordReplay(ctx context.Context, id string, rec replayRecord) error {
	v, _ := json.Marshal(rec)
	if _, err := q.replayKV.Put(ctx, replayKey(id), v); err != nil {
		return fmt.Errorf("dlq: record replay %s: %w", id, retry.Opaque(err))
	}
	return nil
}

// replayedFor returns the group a replayed event is meant for, or "" for any other event. A
// delivery whose ID has a record but whose topic, key or body differ from what Replay
// published under it — someone else published with that ID — is an ordinary event: "" (counted
// in dlq_replay_mismatches_total and logged). A record written by a jetbus before
// fingerprints holds the group's name alone: the replay passes that group (not dead-lettered
// again as parked behind its own letter during an upgrade), and no other group skips it (a
// duplicate for them, never a loss); a record this version cannot read at all is "".
func (q *Queue) replayedFor(ctx context.Context, d *jetbus.Delivery) (string, error) {
	if !strings.HasPrefix(d.ID, replayPrefix) {
		return "", nil
	}
	e, err := q.replayKV.Get(ctx, replayKey(d.ID))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return "", nil // an ID that looks like a replay but is none: an ordinary event
	}
	if err != nil {
		return "", fmt.Errorf("dlq: look up replay %s: %w", d.ID, retry.Opaque(err))
	}
	var rec replayRecord
	why := ""
	switch v := e.Value(); {
	case len(v) > 0 && v[0] != '{' && string(v) == d.Group:
		return d.Group, nil // a legacy record, for this group
	case len(v) > 0 && v[0] != '{':
		why = "the replay record (written before fingerprints) is another group's"
	case json.Unmarshal(v, &rec) != nil || rec.Group == "" || rec.SHA256 == "":
		why = "the replay record has no fingerprint"
	case rec.Topic != d.Topic:
		why = "another topic"
	case rec.Key != d.Key:
		why = "another key"
	case rec.SHA256 != bodySHA256(d.Msg.Data):
		why = "another body"
	default:
		return rec.Group, nil
	}
	if d.Attempt <= 1 {
		q.metrics.replayMismatch(d.Topic, d.Group)
		level := slog.LevelDebug
		if now, last := time.Now().UnixNano(), q.mismatchLog.Load(); now-last >= int64(10*time.Second) && q.mismatchLog.CompareAndSwap(last, now) {
			level = slog.LevelWarn
		}
		q.log.Log(ctx, level, "dlq: an event carries a replay's ID but is not what the replay published: delivered as an ordinary event",
			"why", why, "id", d.ID, "topic", d.Topic, "group", d.Group, "stream", d.Msg.Stream, "seq", d.Msg.Seq)
	}
	return "", nil
}

// Replay republishes the dead letters matching opts.Filter, oldest first, through pub, and
// removes each once its republish is acknowledged. See the package doc for what a replayed
// event carries. A letter that fails to republish (e.g. a schema violation) stays and is
// reported; the replay goes on with the others, except that later letters of the same group,
// topic and key are held back to keep their order (a key's order is a topic's: letters of
// the key in other topics, or of other groups, go on).
//
// It streams: letters are read a fetch at a time and replayed ReplayChunk at a time (letters
// of different keys at once, of one key in order), and the report keeps counts, not letters,
// so memory stays bounded whatever the DLQ holds. Each replayed letter is removed before the
// chunk ends, so an interrupted replay (ctx ended) loses nothing: a letter being replayed
// when ctx ends is finished, the others stay, and a later replay from ReplayReport.Resume
// (Filter.From) goes on. A letter republished but not yet removed when the process died is
// republished with the same event ID (ReplayID): dropped as a duplicate within the topic's
// duplicate window.
func (q *Queue) Replay(ctx context.Context, pub Publisher, opts ReplayOptions) (rep *ReplayReport, err error) {
	if err := opts.Filter.validate(); err != nil {
		return nil, err
	}
	if !opts.DryRun {
		var span trace.Span
		ctx, span = q.startReplayRun(ctx, opts.Filter)
		defer func() { endReplayRun(span, rep, err) }()
	}
	r := &replayer{q: q, pub: pub, opts: opts, rep: &ReplayReport{Failed: map[Position]error{}},
		blocked: map[[16]byte]struct{}{}, touched: map[parkRef]struct{}{}}
	if !opts.DryRun {
		if r.streams, err = q.openStores(ctx); err != nil {
			return nil, err
		}
	}
	onStore := func(n uint64) { r.total += int(n) }
	err = q.scan(ctx, opts.Filter, false, onStore, func(l *Letter) bool {
		if opts.Limit > 0 && r.rep.Selected >= opts.Limit {
			r.limited = true
			return false
		}
		r.rep.Selected++
		if opts.DryRun {
			r.rep.Last = l.Position()
			r.done++
			if opts.OnLetter != nil {
				opts.OnLetter(l, nil, nil)
			}
			r.progress()
			return true
		}
		r.chunk = append(r.chunk, l)
		r.chunkBytes += len(l.Body) + 512
		if len(r.chunk) >= chunkLetters || r.chunkBytes >= replayChunkBytes {
			return r.flush(ctx)
		}
		return true
	})
	if err == nil && len(r.chunk) > 0 {
		r.flush(ctx)
	}
	if ctx.Err() != nil && err == nil {
		err = ctx.Err()
	}
	if r.rep.Resume == (Position{}) && r.rep.Last != (Position{}) && (err != nil || r.stopped != nil || r.limited) {
		// Stopped before the end: go on after the last letter handled.
		r.rep.Resume = Position{Stream: r.rep.Last.Stream, Seq: r.rep.Last.Seq + 1}
	}
	// Keys whose letters were replayed are released even when ctx ended: they are no longer
	// behind anything.
	relErr := r.release(ctx)
	if r.stopped != nil {
		err = errors.Join(r.stopped, err)
	}
	return r.rep, errors.Join(err, relErr)
}

// replayer is one Replay's state: bounded by ReplayChunk letters, MaxBlockedKeys failed keys
// and releaseBatch replayed keys.
type replayer struct {
	q       *Queue
	pub     Publisher
	streams map[string]natsjs.Stream // by name
	opts    ReplayOptions
	rep     *ReplayReport

	chunk       []*Letter
	chunkBytes  int
	done, total int
	limited     bool // Limit letters were selected and one more was read

	mu      sync.Mutex
	blocked map[[16]byte]struct{} // hashes of group, topic and key of letters that failed
	stopped error                 // set when blocked is full: no letter is started after it

	touched map[parkRef]struct{} // keys of replayed letters, to release (with parking)
}

// result is what became of one letter of a chunk.
type result struct {
	ev      *jetbus.Event
	err     error
	handled bool
}

// flush replays the chunk: each key's letters in order, different keys at once. It reports
// the results in the chunk's order and tells the scan whether to go on.
func (r *replayer) flush(ctx context.Context) bool {
	chunk := r.chunk
	r.chunk, r.chunkBytes = nil, 0
	results := make([]result, len(chunk))
	var lanes [][]int
	laneOf := map[string]int{}
	for i, l := range chunk {
		if l.Key == "" {
			lanes = append(lanes, []int{i})
			continue
		}
		k := l.Topic + "\x00" + l.Key
		j, ok := laneOf[k]
		if !ok {
			j = len(lanes)
			laneOf[k] = j
			lanes = append(lanes, nil)
		}
		lanes[j] = append(lanes[j], i)
	}
	work := make(chan []int)
	var wg sync.WaitGroup
	for range min(replayWorkers, len(lanes)) {
		wg.Go(func() {
			for lane := range work {
				for _, i := range lane {
					if ctx.Err() != nil || r.isStopped() {
						break
					}
					results[i] = r.one(ctx, chunk[i])
				}
			}
		})
	}
	for _, lane := range lanes {
		work <- lane
	}
	close(work)
	wg.Wait()

	rep := r.rep
	for i, l := range chunk {
		res := results[i]
		if !res.handled {
			if rep.Resume == (Position{}) {
				rep.Resume = l.Position()
			}
			continue
		}
		rep.Last = l.Position()
		r.done++
		if res.err != nil {
			rep.FailedCount++
			if len(rep.Failed) < MaxReportedFailures {
				rep.Failed[l.Position()] = res.err
			}
			if rep.Resume == (Position{}) {
				rep.Resume = l.Position()
			}
		} else {
			rep.Replayed++
			r.q.metrics.replay(l.Topic)
			if r.q.cfg.Parking && l.Key != "" && !l.Rejected() {
				r.touched[parkRef{l.Group, l.OriginalStream, l.Topic, l.Key}] = struct{}{}
			}
		}
		if r.opts.OnLetter != nil {
			r.opts.OnLetter(l, res.ev, res.err)
		}
		r.progress()
	}
	if len(r.touched) >= releaseBatch {
		if err := r.release(ctx); err != nil {
			r.mu.Lock()
			if r.stopped == nil {
				r.stopped = err // the keys not released stay in touched for the final release
			}
			r.mu.Unlock()
		}
	}
	return ctx.Err() == nil && !r.isStopped()
}

func (r *replayer) progress() {
	if r.opts.Progress != nil {
		total := r.total
		if r.opts.Limit > 0 {
			total = min(total, r.opts.Limit)
		}
		r.opts.Progress(ReplayProgress{Done: r.done, Total: max(total, r.done), Failed: r.rep.FailedCount})
	}
}

func (r *replayer) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped != nil
}

// one replays l unless an earlier letter of its group, topic and key failed, or it is a
// refusal a replay may not bypass. A letter once started is finished even if ctx ends
// meanwhile, so that an interruption never leaves a republished letter in the DLQ for long.
func (r *replayer) one(ctx context.Context, l *Letter) result {
	gk := blockKey(l)
	var ev *jetbus.Event
	var err error
	r.mu.Lock()
	_, blocked := r.blocked[gk]
	r.mu.Unlock()
	switch {
	case l.Key != "" && blocked:
		err = fmt.Errorf("an earlier letter of key %q of topic %s in group %s did not replay", l.Key, l.Topic, l.Group)
	case l.Truncated():
		err = fmt.Errorf("%w: only the first %d of its %d bytes were kept when ingress refused it (dlq.rejects.max_body, or the server's max payload; the whole body's SHA-256 is %s): it cannot be replayed, --force or not", ErrNotReplayable, len(l.Body), l.BodySize, l.BodySHA256)
	case l.Rejected() && l.Group == ingressGroup && !r.opts.Force && !slices.Contains(r.opts.IngressTopics, l.Topic):
		err = fmt.Errorf("%w: ingress refused it and topic %q is not open to ingress (ingress.allow); --force replays it anyway, bypassing ingress's allow list", ErrNotReplayable, l.Topic)
	default:
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		ev, err = r.q.replayOne(octx, r.pub, r.streams[l.Stream], l, r.opts.Transform)
		cancel()
	}
	if err != nil && l.Key != "" && !blocked {
		r.mu.Lock()
		if len(r.blocked) < maxBlockedKeys {
			r.blocked[gk] = struct{}{}
		} else if r.stopped == nil {
			r.stopped = fmt.Errorf("%w: letters of more than %d keys failed; fix the cause or discard them, then replay again", ErrTooManyFailures, maxBlockedKeys)
		}
		r.mu.Unlock()
	}
	return result{ev: ev, err: err, handled: true}
}

// release releases the touched keys that have no letter left; it forgets the keys it
// released and those with letters left, and keeps those it could not release for the next
// call. It runs even when ctx ended (a replay interrupted by --timeout or a signal, whose
// replayed keys must not stay parked with no letter), bounded by releaseTimeout.
func (r *replayer) release(ctx context.Context) error {
	return r.q.releaseDetached(ctx, r.touched)
}

// blockKey identifies a letter's group, topic and key in 16 bytes, whatever the key's length.
// Its letters share a lane of flush (topic and key), so they are replayed in order by one
// worker: a failure holds back exactly the later ones.
func blockKey(l *Letter) [16]byte {
	h := sha256.New()
	h.Write([]byte(l.Group))
	h.Write([]byte{0})
	h.Write([]byte(l.Topic))
	h.Write([]byte{0})
	h.Write([]byte(l.Key))
	var k [16]byte
	copy(k[:], h.Sum(nil))
	return k
}

func (q *Queue) replayOne(ctx context.Context, pub Publisher, s natsjs.Stream, l *Letter, transform func(*Letter) (json.RawMessage, error)) (ev *jetbus.Event, err error) {
	ctx, span := q.startReplay(ctx, l)
	defer func() { endSpan(span, "", 0, err) }()
	body := l.Body
	if transform != nil {
		var err error
		if body, err = transform(l); err != nil {
			return nil, fmt.Errorf("transform: %w", err)
		}
	}
	opts := []jetbus.PublishOption{jetbus.WithDerivedID(ReplayID(l))}
	if l.OriginalID != "" {
		opts = append(opts, jetbus.WithCausedBy(l.OriginalID))
	}
	if l.Key != "" {
		opts = append(opts, jetbus.WithKey(l.Key))
	}
	if sid := l.Header.Get(jetbus.HeaderSID); sid != "" {
		opts = append(opts, jetbus.WithSID(sid))
	}
	if tags := l.Header.Get(jetbus.HeaderTags); tags != "" {
		opts = append(opts, jetbus.WithTags(strings.Split(tags, ",")...))
	}
	headers := map[string]string{}
	for k, v := range l.Header {
		if len(v) == 0 || !strings.HasPrefix(k, "x-") || jetbus.ValidateHeaderName(k) != nil ||
			k == jetbus.HeaderSchemaVersion {
			continue // reserved and mapped headers are not the event's; the publish path stamps the schema version again
		}
		headers[k] = v[0]
	}
	opts = append(opts, jetbus.WithHeaders(headers))
	// The original's trace context: the replayed event continues its trace (the Bus makes its
	// publish span a child of ctx's replay span when it traces, or carries these as they are).
	if tp, ts := l.Header.Get(jetbus.HeaderTraceParent), l.Header.Get(jetbus.HeaderTraceState); tp != "" || ts != "" {
		opts = append(opts, jetbus.WithTraceContext(tp, ts))
	}
	if bag := l.Header.Get(jetbus.HeaderBaggage); bag != "" {
		opts = append(opts, jetbus.WithBaggage(bag))
	}
	if !l.Rejected() { // a rejected message never reached its topic: every group gets it
		rec := replayRecord{Group: l.Group, Topic: l.Topic, Key: l.Key, SHA256: bodySHA256(body)}
		if err := q.recordReplay(ctx, ReplayID(l), rec); err != nil {
			return nil, err
		}
	}
	ev, err = pub.Publish(ctx, l.Topic, body, opts...)
	if err != nil {
		return nil, fmt.Errorf("republish to %s: %w", l.Topic, err)
	}
	if err := s.DeleteMsg(ctx, l.Seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
		return ev, fmt.Errorf("remove dead letter %d after republishing it as %s: %w", l.Seq, ev.ID, err)
	}
	return ev, nil
}

// Discard removes the dead letters matching f (at most limit; 0: all) and returns how many.
// It streams like Replay: it reads the letters' headers a fetch at a time and removes them a
// chunk at a time, so memory stays bounded; an interrupted discard is resumed by discarding
// again (what it removed is gone).
func (q *Queue) Discard(ctx context.Context, f Filter, limit int) (int, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	streams, err := q.openStores(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	touched := map[parkRef]struct{}{}
	var chunk []*Letter
	var failed error
	flush := func() bool {
		errs := make([]error, len(chunk))
		work := make(chan int)
		var wg sync.WaitGroup
		for range min(replayWorkers, len(chunk)) {
			wg.Go(func() {
				for i := range work {
					l := chunk[i]
					err := streams[l.Stream].DeleteMsg(ctx, l.Seq)
					if err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
						errs[i] = fmt.Errorf("dlq: discard %s: %w", l.Position(), retry.Opaque(err))
					}
				}
			})
		}
		for i := range chunk {
			work <- i
		}
		close(work)
		wg.Wait()
		for i, l := range chunk {
			if errs[i] != nil {
				failed = errors.Join(failed, errs[i])
				continue
			}
			n++
			q.metrics.discard(l.Topic)
			if q.cfg.Parking && l.Key != "" && !l.Rejected() {
				touched[parkRef{l.Group, l.OriginalStream, l.Topic, l.Key}] = struct{}{}
			}
		}
		chunk = chunk[:0]
		if len(touched) >= releaseBatch {
			if err := q.releaseDetached(ctx, touched); err != nil {
				failed = errors.Join(failed, err) // the keys not released stay for the final release
			}
		}
		return failed == nil && ctx.Err() == nil
	}
	seen := 0
	err = q.scan(ctx, f, true, nil, func(l *Letter) bool {
		if limit > 0 && seen >= limit {
			return false
		}
		seen++
		chunk = append(chunk, l)
		if len(chunk) >= ReplayChunk {
			return flush()
		}
		return true
	})
	if err == nil && failed == nil && len(chunk) > 0 {
		flush()
	}
	return n, errors.Join(err, failed, q.releaseDetached(ctx, touched))
}

type parkRef struct{ group, stream, topic, key string }

// releaseTimeout bounds one release of replayed or discarded keys, which runs even when the
// caller's ctx ended.
const releaseTimeout = time.Minute

// releaseDetached is release on a context that ctx's end does not cancel, bounded by
// releaseTimeout: keys whose letters are gone must not stay parked because the replay or
// discard that removed them was interrupted.
func (q *Queue) releaseDetached(ctx context.Context, touched map[parkRef]struct{}) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return q.release(rctx, touched)
}

// release unparks every touched key that has no dead letter left in its group: one scan of
// the headers of the DLQ stream's letters of the touched topics, whatever their number. It
// removes from touched the keys it released and those that still have letters (they stay
// parked, rightly); the keys it could not release stay in touched, and their errors are
// joined. If the scan fails, touched is left as it was.
func (q *Queue) release(ctx context.Context, touched map[parkRef]struct{}) error {
	if !q.cfg.Parking || len(touched) == 0 {
		return nil
	}
	topics := map[string]bool{}
	for r := range touched {
		topics[r.topic] = true
	}
	f := Filter{}
	if len(topics) == 1 {
		for t := range topics {
			f.Topic = t
		}
	}
	left := map[parkRef]bool{}
	err := q.scan(ctx, f, true, nil, func(l *Letter) bool {
		r := parkRef{l.Group, l.OriginalStream, l.Topic, l.Key}
		if _, ok := touched[r]; ok {
			left[r] = true
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("dlq: release keys: %w", err)
	}
	var errs []error
	for r := range touched {
		if !left[r] {
			if err := q.unpark(ctx, r.group, r.stream, r.key); err != nil {
				if len(errs) < MaxReportedFailures {
					errs = append(errs, fmt.Errorf("dlq: release key %q: %w", r.key, retry.Opaque(err)))
				}
				continue
			}
		}
		delete(touched, r)
	}
	if len(errs) > 0 && len(touched) > len(errs) {
		errs = append(errs, fmt.Errorf("dlq: %d keys not released in all", len(touched)))
	}
	return errors.Join(errs...)
}
