package projection_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/partition"
	"github.com/jetbus/jetbus/projection"
)

// reader reads the view as the snapshot API does, again and again: it resolves the live
// collection, then reads every document. It records every read that was not the complete
// view.
type reader struct {
	e        *env
	keys     int
	want     map[string]int64
	mu       sync.Mutex
	reads    int
	problems []string
	seen     map[string]int // reads per collection
}

func (r *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		live, err := projection.ReadLive(ctx, r.e.db, "orders-view", "view")
		if err != nil {
			continue
		}
		cur, err := r.e.db.Collection(live.Collection).Find(ctx, bson.D{{Key: "_deleted", Value: bson.D{{Key: "$ne", Value: true}}}})
		if err != nil {
			continue
		}
		var docs []bson.M
		if err := cur.All(ctx, &docs); err != nil {
			continue
		}
		problem := ""
		if len(docs) != r.keys {
			problem = fmt.Sprintf("%s: %d documents, want %d", live.Collection, len(docs), r.keys)
		}
		for _, d := range docs {
			if id, _ := d["_id"].(string); d["n"] != r.want[id] {
				problem = fmt.Sprintf("%s: %s is %v, want %d", live.Collection, id, d["n"], r.want[id])
				break
			}
		}
		r.mu.Lock()
		r.reads++
		r.seen[live.Collection]++
		if problem != "" {
			r.problems = append(r.problems, problem)
		}
		r.mu.Unlock()
	}
}

// TestRebuildSwitchesReaders: a rebuild builds the next generation from the earliest event
// while the live one serves, switches readers at once when it caught up, hands the new
// generation to the running projector and removes the old one after the grace period; a
// reader reading all the while never sees an empty or partial view.
func TestRebuildSwitchesReaders(t *testing.T) {
	e := newEnv(t, "orders", 4)
	const keys, versions = 200, 10
	want := map[string]int64{}
	for v := range versions {
		for k := range keys {
			n := int64(v*keys + k)
			e.publishAsync(fmt.Sprintf("k%d", k), fmt.Sprintf(`{"n":%d}`, n))
			want[fmt.Sprintf("k%d", k)] = n
		}
	}
	e.flushAsync()
	e.requirePublished()
	cfg := e.config("orders-view")
	cfg.History = time.Hour
	running := start(t, e.changelog(cfg).Run)
	e.waitLag("orders-view", 30*time.Second)

	rd := &reader{e: e, keys: keys, want: want, seen: map[string]int{}}
	rctx, stopReader := context.WithCancel(context.Background())
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		rd.run(rctx)
	}()
	var progress []projection.RebuildProgress
	var pmu sync.Mutex
	live, err := projection.Rebuild(context.Background(), e.bus, e.db.Client(), e.q, cfg, projection.RebuildOptions{
		Grace: time.Second, Handover: 10 * time.Second,
		Progress: func(p projection.RebuildProgress) { pmu.Lock(); progress = append(progress, p); pmu.Unlock() },
	}, projection.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err)
	assert.Equal(t, 1, live.Generation)
	assert.Equal(t, "view-g1", live.Collection)
	assert.Equal(t, "orders-view-g1", live.Group)
	require.True(t, embeddedtest.Poll(10*time.Second, 5*time.Millisecond, func() bool {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		return rd.seen["view-g1"] >= 3
	}), "the reader reads the new generation a few times")
	stopReader()
	<-readerDone

	rd.mu.Lock()
	assert.Empty(t, rd.problems, "reads that were not the complete view")
	assert.Positive(t, rd.seen["view"], "the reader read generation 0")
	assert.Positive(t, rd.seen["view-g1"], "the reader read generation 1")
	t.Logf("%d reads: %v", rd.reads, rd.seen)
	rd.mu.Unlock()

	pmu.Lock()
	require.NotEmpty(t, progress)
	lastP := progress[len(progress)-1]
	assert.True(t, lastP.CaughtUp)
	assert.Equal(t, uint64(keys*versions), lastP.Done)
	assert.Equal(t, lastP.Done, lastP.Total)
	pmu.Unlock()

	// The old generation is gone, the running projector follows the new one.
	names, err := e.db.ListCollectionNames(context.Background(), bson.D{})
	require.NoError(t, err)
	assert.NotContains(t, names, "view")
	assert.NotContains(t, names, "view_history")
	assert.Contains(t, names, "view-g1_history")
	e.publish("k0", `{"n":-1}`)
	require.Eventually(t, func() bool {
		return e.docs("view-g1")["k0"]["n"] == int64(-1)
	}, 20*time.Second, 20*time.Millisecond, "the running projector writes the new generation")
	require.NoError(t, running.stop())
}

// TestRebuildLock: a rebuild that recorded progress recently holds the lock; one silent for
// RebuildLockTTL (its process died) is taken over.
func TestRebuildLock(t *testing.T) {
	cases := []struct {
		name    string
		updated time.Duration // how long ago the other rebuild recorded progress
		wantErr error
	}{
		{"running", time.Second, projection.ErrRebuildRunning},
		{"dead", projection.RebuildLockTTL + time.Second, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "orders", 1)
			for i := range 20 {
				e.publish(fmt.Sprintf("k%d", i), `{"n":1}`)
			}
			at := time.Now().Add(-tc.updated)
			_, err := e.db.Collection(projection.ProjectionsCollection).InsertOne(context.Background(), projection.Live{
				Name: "orders-view", Collection: "view", Group: "orders-view",
				Rebuild: &projection.RebuildProgress{Generation: 1, Owner: "another process", Started: at, Updated: at},
			})
			require.NoError(t, err)
			live, err := projection.Rebuild(context.Background(), e.bus, e.db.Client(), e.q, e.config("orders-view"),
				projection.RebuildOptions{Handover: 10 * time.Millisecond, Grace: 10 * time.Millisecond})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, live.Generation)
			assert.Len(t, e.docs("view-g1"), 20)
		})
	}
}

// TestRebuildSwitchesWhileEventsFlow: under a steady flow of events neither generation's lag
// is ever zero for long (each has a batch in flight); the rebuild switches once it has written
// every event the live generation had written, without waiting for the flow to stop, and the
// new generation, handed to the running projector, ends with every key's last event.
func TestRebuildSwitchesWhileEventsFlow(t *testing.T) {
	e := newEnv(t, "orders", 4)
	cfg := e.config("orders-view")
	running := start(t, e.changelog(cfg).Run)
	const keys = 50
	want := map[string]int64{}
	for i := range 500 {
		e.publishAsync(fmt.Sprintf("k%d", i%keys), fmt.Sprintf(`{"n":%d}`, i))
		want[fmt.Sprintf("k%d", i%keys)] = int64(i)
	}
	e.flushAsync()
	e.requirePublished()
	e.waitLag("orders-view", 30*time.Second)

	var mu sync.Mutex
	published := 500
	flow, stopFlow := context.WithCancel(context.Background())
	flowed := make(chan struct{})
	go func() { // an event every 2 ms, each key in turn
		defer close(flowed)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-flow.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			i := published
			published++
			want[fmt.Sprintf("k%d", i%keys)] = int64(i)
			mu.Unlock()
			e.publishAsync(fmt.Sprintf("k%d", i%keys), fmt.Sprintf(`{"n":%d}`, i))
		}
	}()
	defer func() { stopFlow(); <-flowed }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	var switched time.Duration
	var switchedAt int
	live, err := projection.Rebuild(ctx, e.bus, e.db.Client(), e.q, cfg, projection.RebuildOptions{
		Grace: 100 * time.Millisecond, Handover: 10 * time.Second,
		Progress: func(p projection.RebuildProgress) {
			if p.CaughtUp && switched == 0 {
				mu.Lock()
				switched, switchedAt = time.Since(began), published
				mu.Unlock()
			}
		},
	}, projection.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err, "the rebuild switches while events flow")
	assert.Equal(t, "view-g1", live.Collection)
	mu.Lock()
	atSwitch := published
	t.Logf("switched after %s, at %d events published; handed over after %s", switched.Round(time.Millisecond), switchedAt, time.Since(began).Round(time.Millisecond))
	mu.Unlock()
	require.True(t, poll(10*time.Second, 5*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return published > atSwitch+100
	}), "events went on flowing")
	stopFlow()
	<-flowed
	e.flushAsync()
	e.requirePublished()
	e.waitLag("orders-view-g1", 30*time.Second)
	docs := e.docs("view-g1")
	for k, n := range want {
		assert.Equal(t, n, docs[k]["n"], "key %s", k)
	}
	require.NoError(t, running.stop())
}

// TestRebuildEndsWhenItsWriterFails: the new generation's writer ending by itself (its NATS
// connection closed as soon as it started) ends the rebuild with that error. The rebuild
// used to wait for the writer's one result a second time, after catching up had taken it,
// and never returned.
func TestRebuildEndsWhenItsWriterFails(t *testing.T) {
	e := newEnv(t, "orders", 2)
	for i := range 20 {
		e.publish(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	bus := embeddedtest.Bus(t, e.url)
	done := make(chan error, 1)
	go func() {
		_, err := projection.Rebuild(context.Background(), bus, e.db.Client(), e.q, e.config("orders-view"), projection.RebuildOptions{},
			projection.WithLogger(embeddedtest.Logger(t)),
			projection.WithWaitHook(func([]*partition.Subscriber, func() int) { bus.Conn().Close() }))
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, jetbus.ErrClosed)
	case <-time.After(60 * time.Second):
		t.Fatal("Rebuild did not return after its writer ended")
	}
}

// TestRebuildHandoverEndsWithItsWriter: a new generation's writer that ends by itself after
// the switch (its NATS connection closed) ends the handover at once, not after Handover.
func TestRebuildHandoverEndsWithItsWriter(t *testing.T) {
	e := newEnv(t, "orders", 2)
	for i := range 20 {
		e.publish(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	bus := embeddedtest.Bus(t, e.url)
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := projection.Rebuild(context.Background(), bus, e.db.Client(), e.q, e.config("orders-view"), projection.RebuildOptions{
			Handover: time.Hour, KeepPrevious: true,
			Progress: func(p projection.RebuildProgress) {
				if p.CaughtUp {
					once.Do(func() { bus.Conn().Close() })
				}
			},
		}, projection.WithLogger(embeddedtest.Logger(t)))
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "switched before the writer ended")
	case <-time.After(60 * time.Second):
		t.Fatal("the handover did not end with its writer")
	}
}
