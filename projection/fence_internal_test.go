package projection

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
)

func deliveries(from, to uint64) []*entry {
	var out []*entry
	for s := from; s <= to; s++ {
		out = append(out, &entry{d: &jetbus.Delivery{Event: &jetbus.Event{ID: fmt.Sprintf("e%d", s), Topic: "orders", Key: "k", Seq: s}}})
	}
	return out
}

// TestZombieFenced: an owner that read the checkpoint before another owner committed (a
// zombie that lost its lease) has its commit refused by the fence, and applies nothing;
// through apply, it then reloads the checkpoint and skips what the other owner applied.
func TestZombieFenced(t *testing.T) {
	db := embeddedtest.Mongo(t)
	ctx := context.Background()
	h := func(ctx context.Context, d *jetbus.Delivery) error {
		_, err := db.Collection("counters").UpdateOne(ctx, bson.D{{Key: "_id", Value: "all"}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
		return err
	}
	tx := &Transactional{cfg: Config{Name: "g", MaxAttempts: 1}, client: db.Client(), cps: db.Collection(CheckpointsCollection),
		h: h, set: settings{log: slog.New(slog.DiscardHandler)}}
	count := func() int64 {
		var doc struct {
			N int64 `bson:"n"`
		}
		require.NoError(t, db.Collection("counters").FindOne(ctx, bson.D{{Key: "_id", Value: "all"}}).Decode(&doc))
		return doc.N
	}
	id := CheckpointID("g", "orders", 0)
	cases := []struct {
		name       string
		owner      []uint64 // the owner's batch, committed first
		zombie     []uint64 // the zombie's batch, on the checkpoint read before
		wantCount  int64
		wantCommit uint64
	}{
		{"no checkpoint yet: the zombie's insert clashes", []uint64{1, 10}, []uint64{1, 5}, 10, 10},
		{"checkpoint moved: the zombie's conditional update misses", []uint64{11, 20}, []uint64{11, 15}, 20, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owner, err := readCheckpoint(ctx, tx.cps, id)
			require.NoError(t, err)
			zombie, err := readCheckpoint(ctx, tx.cps, id)
			require.NoError(t, err)
			sess, err := db.Client().StartSession()
			require.NoError(t, err)
			defer sess.EndSession(ctx)
			require.NoError(t, tx.commit(ctx, sess, owner, deliveries(tc.owner[0], tc.owner[1]), tc.owner[1]))

			zsess, err := db.Client().StartSession()
			require.NoError(t, err)
			defer zsess.EndSession(ctx)
			err = tx.commit(ctx, zsess, zombie, deliveries(tc.zombie[0], tc.zombie[1]), tc.zombie[1])
			require.ErrorIs(t, err, ErrFenced)
			assert.Equal(t, tc.wantCount, count(), "the zombie's writes were applied")
			seq, err := ReadCheckpoint(ctx, db, "g", "orders", 0)
			require.NoError(t, err)
			assert.Equal(t, tc.wantCommit, seq)

			// Through apply: the fence, a reload, and nothing left to do.
			tp := &txPart{cp: zombie, sess: zsess}
			ps := &partState{topic: "orders", p: 0, state: tp}
			require.NoError(t, tx.apply(ctx, ps, &batch{topic: "orders", entries: deliveries(tc.zombie[0], tc.zombie[1])}))
			assert.Equal(t, tc.wantCount, count())
			assert.Equal(t, tc.wantCommit, tp.cp.seq, "the zombie reloaded the checkpoint")
		})
	}
}

// TestCommitTimeoutReleasesTheTransaction: a batch whose context ends before its commit (a
// handler slower than the write timeout) leaves no transaction open behind it: the documents
// it wrote are free for another owner at once (not after the 60 s transaction lifetime), and
// the same session commits the batch on the next attempt.
func TestCommitTimeoutReleasesTheTransaction(t *testing.T) {
	db := embeddedtest.Mongo(t)
	ctx := context.Background()
	counters := db.Collection("counters")
	var slow atomic.Bool
	h := func(ctx context.Context, d *jetbus.Delivery) error {
		_, err := counters.UpdateOne(ctx, bson.D{{Key: "_id", Value: "all"}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
		if err == nil && slow.Load() {
			<-ctx.Done() // the handler outlives the batch's write timeout
		}
		return err
	}
	tx := &Transactional{cfg: Config{Name: "g", MaxAttempts: 1}, client: db.Client(), cps: db.Collection(CheckpointsCollection),
		h: h, set: settings{log: slog.New(slog.DiscardHandler)}}
	id := CheckpointID("g", "orders", 0)
	cp, err := readCheckpoint(ctx, tx.cps, id)
	require.NoError(t, err)
	sess, err := db.Client().StartSession()
	require.NoError(t, err)
	defer sess.EndSession(ctx)
	require.NoError(t, tx.commit(ctx, sess, cp, deliveries(1, 1), 1))

	slow.Store(true)
	bctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = tx.commit(bctx, sess, cp, deliveries(2, 2), 2)
	cancel()
	require.Error(t, err, "the commit of a batch whose context ended")

	// Another session writes the same documents at once: no write conflict with an
	// abandoned transaction.
	other, err := db.Client().StartSession()
	require.NoError(t, err)
	defer other.EndSession(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	_, err = other.WithTransaction(wctx, func(sctx context.Context) (any, error) {
		return counters.UpdateOne(sctx, bson.D{{Key: "_id", Value: "all"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 100}}}})
	})
	require.NoError(t, err, "the documents of the timed-out transaction are free")

	// The same session goes on.
	slow.Store(false)
	require.NoError(t, tx.commit(ctx, sess, cp, deliveries(2, 2), 2))
	seq, err := ReadCheckpoint(ctx, db, "g", "orders", 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), seq)
	var doc struct {
		N int64 `bson:"n"`
	}
	require.NoError(t, counters.FindOne(ctx, bson.D{{Key: "_id", Value: "all"}}).Decode(&doc))
	assert.Equal(t, int64(102), doc.N, "event 1, the other session's 100, event 2: the timed-out attempt applied nothing")
}
