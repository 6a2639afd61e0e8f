package minimongo_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// TestPersistCloseDuringWrites stops a server while clients write to it, with periodic
// snapshots racing the final one: every write the server acknowledged is there after the
// restart, and nothing is there that no client sent.
func TestPersistCloseDuringWrites(t *testing.T) {
	dir := t.TempDir()
	opts := minimongo.Options{Dir: dir, SnapshotInterval: time.Millisecond}
	s1, c1 := startServer(t, opts)
	coll := c1.Database("app").Collection("c")

	const writers = 4
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string]bool{}
		sent  = map[string]bool{}
	)
	stopWriters := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				mu.Lock()
				sent[id] = true
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				_, err := coll.InsertOne(ctx, d("_id", id, "w", w, "i", i))
				cancel()
				if err == nil {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	require.Eventually(t, func() bool { return ackedCount() >= 200 }, 20*time.Second, time.Millisecond)
	require.NoError(t, s1.Close(), "the final snapshot is written")
	require.Greater(t, s1.SnapshotsWritten(), int64(1), "periodic snapshots raced the writes")
	close(stopWriters)
	wg.Wait()
	stop(t, s1, c1, false)

	_, c2 := startServer(t, opts)
	cur, err := c2.Database("app").Collection("c").Find(ctx(t), bson.D{})
	require.NoError(t, err)
	present := map[string]bool{}
	for cur.Next(ctx(t)) {
		present[cur.Current.Lookup("_id").StringValue()] = true
	}
	require.NoError(t, cur.Err())
	for id := range acked {
		assert.True(t, present[id], "acknowledged write %s lost", id)
	}
	for id := range present {
		assert.True(t, sent[id], "document %s that no client sent", id)
	}
	t.Logf("%d acknowledged, %d present after the restart", len(acked), len(present))
}

// TestPersistWriteFailure: a state that cannot be written is an error from Close, not a
// silent loss.
func TestPersistWriteFailure(t *testing.T) {
	dir := t.TempDir()
	s, c := startServer(t, minimongo.Options{Dir: dir, SnapshotInterval: time.Hour})
	_, err := c.Database("app").Collection("c").InsertOne(ctx(t), d("_id", 1))
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir))
	err = s.Close()
	require.ErrorContains(t, err, "minimongo: writing state")
	require.NoDirExists(t, dir, "Close does not recreate a directory removed under it")
	stop(t, s, c, false)

	// a periodic write that failed is retried until it succeeds
	dir = t.TempDir()
	s, c = startServer(t, minimongo.Options{Dir: dir, SnapshotInterval: time.Millisecond})
	require.NoError(t, os.RemoveAll(dir))
	_, err = c.Database("app").Collection("c").InsertOne(ctx(t), d("_id", 1))
	require.NoError(t, err)
	require.False(t, s.StateSaved(), "nothing can be written to a missing directory")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.Eventually(t, s.StateSaved, 10*time.Second, time.Millisecond)
	stop(t, s, c, true)
	_, c = startServer(t, minimongo.Options{Dir: dir})
	n, err := c.Database("app").Collection("c").CountDocuments(ctx(t), bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
