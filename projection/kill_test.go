package projection_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
)

// The kill tests run projections in subprocesses (this test binary again, in TestChild) and
// kill them with SIGKILL.
const (
	childMode  = "JETBUS_PROJECTION_CHILD" // "tx" or "changelog"
	childNATS  = "JETBUS_PROJECTION_CHILD_NATS"
	childMongo = "JETBUS_PROJECTION_CHILD_MONGO"
	childDB    = "JETBUS_PROJECTION_CHILD_DB"
)

// childConfig is the projection a child runs: short timeouts, so a killed child's partitions
// move on within seconds.
func childConfig(db, name string) projection.Config {
	return projection.Config{Name: name, Topic: "orders", Database: db, Collection: "view", BatchSize: 50,
		TTL: time.Second, AckTimeout: 3 * time.Second, WriteTimeout: 2 * time.Second, StopTimeout: time.Second}
}

// TestChild is the body of a subprocess started by the kill tests; in a normal run it is
// skipped.
func TestChild(t *testing.T) {
	mode := os.Getenv(childMode)
	if mode == "" {
		t.Skip("runs only as a subprocess of the kill tests")
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	nc := embeddedtest.Connect(t, os.Getenv(childNATS))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	bus, err := jetstream.Open(ctx, nc, jetstream.WithLogger(log))
	require.NoError(t, err)
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(childMongo)))
	require.NoError(t, err)
	db := client.Database(os.Getenv(childDB))
	var run func(context.Context) error
	switch mode {
	case "tx":
		p, err := projection.NewTransactional(bus, client, q, counterHandler(db), childConfig(db.Name(), "orders-tx"), projection.WithLogger(log))
		require.NoError(t, err)
		run = p.Run
	case "changelog":
		p, err := projection.NewChangelog(bus, client, q, childConfig(db.Name(), "orders-view"), projection.WithLogger(log))
		require.NoError(t, err)
		run = p.Run
	}
	fmt.Println("child running")
	// Run until SIGKILL (or SIGTERM: then stop gracefully).
	go func() {
		<-signalled()
		stop()
	}()
	require.NoError(t, run(ctx))
}

// signalled is closed on SIGTERM or SIGINT.
func signalled() <-chan struct{} {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		<-ch
		close(done)
	}()
	return done
}

// startChild starts this test binary again as a subprocess running TestChild in mode.
func startChild(t *testing.T, e *env, mode string) *embeddedtest.Process {
	t.Helper()
	cmd := embeddedtest.ChildCommand("-test.run=^TestChild$", "-test.count=1", "-test.v")
	cmd.Env = append(cmd.Env, childMode+"="+mode, childNATS+"="+e.url, childMongo+"="+embeddedtest.MongoURI(t), childDB+"="+e.db.Name())
	return embeddedtest.Start(t, "child "+mode, cmd)
}

// terminate stops a child with SIGTERM and requires a clean exit.
func terminate(t *testing.T, c *embeddedtest.Process) {
	t.Helper()
	code, _ := c.Stop(syscall.SIGTERM, time.Minute)
	require.Equal(t, 0, code, c.Output().Tail(50))
}

// TestExactlyOnceUnderSIGKILL: a transactional projection whose handler $incs a counter per
// event, killed with SIGKILL mid-batch again and again, ends with counter = events.
func TestExactlyOnceUnderSIGKILL(t *testing.T) {
	e := newEnv(t, "orders", 4)
	events, kills := killEvents, killCount
	for i := range events {
		e.publishAsync(fmt.Sprintf("k%d", i%97), fmt.Sprintf(`{"n":%d}`, i))
	}
	e.flushAsync()
	e.requirePublished()
	var last int64
	for k := range kills {
		c := startChild(t, e, "tx")
		// Kill once it made progress, at a random moment of a batch.
		require.Eventually(t, func() bool { return counter(t, e.db, "all") > last }, 60*time.Second, 5*time.Millisecond,
			"kill %d: no progress", k)
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		c.Kill()
		last = counter(t, e.db, "all")
		t.Logf("kill %d: counter %d of %d", k+1, last, events)
		require.LessOrEqual(t, last, int64(events), "an event applied twice")
	}
	c := startChild(t, e, "tx")
	defer func() {
		if t.Failed() { // the view, to tell a lost event from a lag misread
			t.Logf("counter all: %d of %d", counter(t, e.db, "all"), events)
		}
	}()
	e.waitLag("orders-tx", 120*time.Second)
	terminate(t, c)
	assert.Equal(t, int64(events), counter(t, e.db, "all"))
	for k := range 97 {
		want := int64(events / 97)
		if k < events%97 {
			want++
		}
		assert.Equal(t, want, counter(t, e.db, fmt.Sprintf("key:k%d", k)), "key k%d", k)
	}
	assert.Empty(t, e.letters())
}

// TestReplicasUnderSIGKILL: two replicas share the partitions; one is killed with SIGKILL
// while 20k events flow; the view equals a single replica's.
func TestReplicasUnderSIGKILL(t *testing.T) {
	e := newEnv(t, "orders", 8)
	const events = 20000
	a := startChild(t, e, "changelog")
	b := startChild(t, e, "changelog")
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range events {
			key := fmt.Sprintf("k%d", rand.IntN(2000))
			payload := fmt.Sprintf(`{"n":%d,"key":"%s"}`, i, key)
			if i%50 == 49 {
				payload = "null"
			}
			e.publishAsync(key, payload)
		}
		e.flushAsync()
	}()
	require.Eventually(t, func() bool {
		c, err := e.bus.Cursor(context.Background(), "orders", "orders-view")
		if err != nil {
			return false
		}
		var acked uint64
		for _, p := range c.Partitions {
			acked += p.AckFloor
		}
		return acked > 0 && strings.Contains(a.Output().String(), "child running") && strings.Contains(b.Output().String(), "child running")
	}, 60*time.Second, 10*time.Millisecond)
	time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
	a.Kill()
	<-published
	e.requirePublished()
	e.waitLag("orders-view", 120*time.Second)
	terminate(t, b)

	single := e.config("single")
	single.Collection = "single"
	r := start(t, e.changelog(single).Run)
	e.waitLag("single", 120*time.Second)
	require.NoError(t, r.stop())
	got, want := liveDocs(e.docs("view")), liveDocs(e.docs("single"))
	require.NotEmpty(t, want)
	assert.Equal(t, want, got)
	assert.Empty(t, e.letters())
}

// liveDocs drops deleted keys' markers and their expiry.
func liveDocs(docs map[string]bson.M) map[string]bson.M {
	out := map[string]bson.M{}
	for k, d := range docs {
		if d["_deleted"] == true {
			continue
		}
		out[k] = d
	}
	return out
}
