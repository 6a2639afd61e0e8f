package snapshotapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus/internal/retry"
)

// Read-your-writes. A position <partition>:<seq> has been applied when the checkpoint of
// that partition for the view's live group and topic, {_id: "<group>/<topic>/p<n>", seq},
// is at least seq (docs/views.md). While the document cache's change stream on the view's
// database runs (Run), a waiting request reads the checkpoint again only when that stream
// reports a write to it (and at least once a second): the projection's own progress wakes
// it, whatever the number of waiters. Without the stream it polls the checkpoint (2 ms
// doubling to 50 ms). Either way, when the wait runs out: 503 not_applied with Retry-After
// and how far behind the view is. At most Config.MaxWaits requests wait at once; one more
// gets 503 unavailable with Retry-After. A checkpoint only moves forward, so the highest
// value seen is remembered and a position at or below it needs no query. The read that
// follows goes to MongoDB, never to the cache, so it sees at least what the checkpoint
// covers.

// answerMargin is kept from the request's deadline for the answer after a wait.
const answerMargin = 250 * time.Millisecond

var pollBackoff = retry.Backoff{Min: 2 * time.Millisecond, Max: 50 * time.Millisecond}

// checkpointKnown remembers the highest seq seen per checkpoint _id (per database), and
// wakes the requests waiting for a checkpoint when the change stream reports a write to it.
type checkpointKnown struct {
	mu    sync.Mutex
	m     map[string]uint64
	waits map[string]chan struct{} // closed at the next write of the checkpoint
}

// changed returns a channel closed at the next reported write of checkpoint id.
func (k *checkpointKnown) changed(id string) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.waits == nil {
		k.waits = map[string]chan struct{}{}
	}
	ch := k.waits[id]
	if ch == nil {
		ch = make(chan struct{})
		k.waits[id] = ch
	}
	return ch
}

// wrote wakes the requests waiting for checkpoint id.
func (k *checkpointKnown) wrote(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ch := k.waits[id]; ch != nil {
		close(ch)
		delete(k.waits, id)
	}
}

// wroteAll wakes every waiting request: the stream restarted and may have missed writes.
func (k *checkpointKnown) wroteAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, ch := range k.waits {
		close(ch)
		delete(k.waits, id)
	}
}

// notifiedRecheck bounds how long a notified wait goes without reading the checkpoint.
const notifiedRecheck = time.Second

func (k *checkpointKnown) get(id string) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[id]
}

func (k *checkpointKnown) raise(id string, seq uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]uint64{}
	}
	if seq > k.m[id] {
		k.m[id] = seq
	}
}

// CheckpointID is the _id of a checkpoint document: "<group>/<topic>/p<n>".
func CheckpointID(group, topic string, partition int) string {
	return group + "/" + topic + "/p" + strconv.Itoa(partition)
}

// awaitApplied waits until every position of rp.after is applied to v's live collection.
func (s *Server) awaitApplied(ctx context.Context, v *view, live liveState, rp readParams) (refused *apiError) {
	if len(rp.after) == 0 {
		return nil
	}
	ctx, span := s.startAwait(ctx, v, rp)
	defer func() { endAwait(span, refused) }()
	wait := s.cfg.DefaultWait
	if rp.waitSet {
		wait = rp.wait
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = max(0, min(wait, time.Until(dl)-answerMargin))
	}
	deadline := time.Now().Add(wait)
	if wait > 0 {
		if n := s.waiting.Add(1); n > int64(s.cfg.MaxWaits) {
			s.waiting.Add(-1)
			return newError(http.StatusServiceUnavailable, CodeUnavailable, "too many requests are waiting for positions; try again").
				withHeader("Retry-After", "1")
		}
		defer s.waiting.Add(-1)
	}
	for _, p := range rp.after {
		id := v.Database + "\x00" + CheckpointID(live.group, v.Topic, p.partition)
		applied, at, err := s.applied(ctx, v, live, p, id, deadline)
		if err != nil {
			return s.dbError(ctx, err)
		}
		if applied < p.seq {
			e := newError(http.StatusServiceUnavailable, CodeNotApplied,
				"view %s has applied partition %d up to %d, not yet %d (%d behind); try again", v.Name, p.partition, applied, p.seq, p.seq-applied).
				with("partition", p.partition).with("wanted", p.seq).with("applied", applied).with("behind", p.seq-applied).
				with("group", live.group).with("topic", v.Topic).with("waited", wait.String()).
				withHeader("Retry-After", "1")
			if !at.IsZero() {
				e.with("applied_at", at.UTC().Format(time.RFC3339Nano))
			}
			return e
		}
	}
	return nil
}

// applied returns the partition's applied seq once it reaches p.seq or the deadline passed.
func (s *Server) applied(ctx context.Context, v *view, live liveState, p position, id string, deadline time.Time) (uint64, time.Time, error) {
	if known := s.known.get(id); known >= p.seq {
		return known, time.Time{}, nil
	}
	b := pollBackoff
	for {
		// Listen before reading: a write between the read and the wait still wakes it.
		var woken <-chan struct{}
		notified := s.cache.streaming(v.Database)
		if notified {
			woken = s.known.changed(id)
		}
		seq, at, err := readCheckpoint(ctx, v, CheckpointID(live.group, v.Topic, p.partition))
		if err != nil {
			return 0, time.Time{}, err
		}
		s.known.raise(id, seq)
		left := time.Until(deadline)
		if seq >= p.seq || left <= 0 {
			return seq, at, nil
		}
		next := b.Next()
		if notified {
			next = notifiedRecheck
		}
		t := time.NewTimer(min(next, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return seq, at, nil
		case <-woken:
			t.Stop()
		case <-t.C:
		}
	}
}

// readCheckpoint reads a checkpoint's seq (0 when the projection has none yet).
func readCheckpoint(ctx context.Context, v *view, id string) (uint64, time.Time, error) {
	raw, err := v.db.Collection(CheckpointsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "seq", Value: 1}, {Key: "ts", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	d := bsoncore.Document(raw)
	n, _ := intValue(d.Lookup("seq"))
	var at time.Time
	if ms, ok := d.Lookup("ts").DateTimeOK(); ok {
		at = time.UnixMilli(ms)
	}
	return uint64(max(n, 0)), at, nil
}
