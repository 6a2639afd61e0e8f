package snapshotapi_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWatchKeepsNoSnapshot: once a watch has sent its snapshot it holds neither the
// snapshot's read (its cursor keeps the last batch of documents, its session stays open)
// nor the buffer it rendered the snapshot in, so what an open watch costs does not grow with
// the size of the view. (Each of 2,000 watches of a 1,000-document view held about 350 KiB
// that way: cmd/cmdtest's TestWatchLoad, BENCHMARKS.md.)
func TestWatchKeepsNoSnapshot(t *testing.T) {
	a := newAPI(t, false)
	const docs, watches = 400, 12
	note := strings.Repeat("x", 2000)
	for i := range docs {
		a.set("orders", fmt.Sprintf("k%04d", i), 1, bson.D{{Key: "note", Value: note}})
	}
	snapshotBytes := int64(docs * len(note))

	// open opens a watch and reads it up to synced, then leaves it open, reading nothing
	// (nothing changes).
	open := func() (closeIt func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.http.URL+"/v1/views/orders?watch=true", nil)
		require.NoError(t, err)
		res, err := plainTransport.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		r := bufio.NewReader(res.Body)
		n := 0
		for {
			line, err := r.ReadString('\n')
			require.NoError(t, err, "the stream reaches synced")
			if strings.HasPrefix(line, "event: upsert") {
				n++
			}
			if line == "event: synced\n" {
				break
			}
		}
		require.Equal(t, docs, n)
		return func() { cancel(); res.Body.Close() }
	}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	open()() // the first watch starts what all share (the hub, its ring)
	before := heap()
	var closers []func()
	for range watches {
		closers = append(closers, open())
	}
	grown := heap() - before
	for _, c := range closers {
		c()
	}
	t.Logf("heap grew %d KiB for %d open watches of a %d KiB snapshot", grown>>10, watches, snapshotBytes>>10)
	assert.Less(t, grown/watches, snapshotBytes/8, "an open watch holds nothing of the size of its snapshot")
}
