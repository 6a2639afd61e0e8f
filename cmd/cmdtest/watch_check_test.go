package cmdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/jetstream"
)

// watchCheckSize is the size of TestWatchChecker's run: watchCheck, in
// watch_check_short_test.go (make test) or watch_check_long_test.go (make test-long).
type watchCheckSize struct {
	events  int // new versions published
	keys    int
	clients int
	rate    int // new versions published a second, at most
}

// TestWatchChecker checks what a watch promises (docs/views.md, "What a client receives")
// through the processes while things go wrong. Two `projector run` replicas share one NATS
// and the MongoDB test backend; watchCheck.events versions are published over watchCheck.keys
// keys (upserts and tombstones, versioned by the payload's /version), some of them more than
// once; SSE clients watch from random positions on either replica — from scratch (snapshot,
// synced, changes), from a list's Jetbus-Position, from another client's event id — and
// disconnect and resume with Last-Event-ID on the other replica. Along the way MongoDB
// reports write concern errors on writes that applied (the projection writes those batches
// again), one replica is SIGKILLed (its clients resume on the other) and started again, and
// `projector rebuild` builds the view's next generation and switches readers to it while
// events flow (the run goes on until a tenth of the events went to the new generation, which
// the replicas took over). Then, for every client and key:
//
//   - the versions it received strictly increase, and each was published, with its document
//     (a client that started from another's id continues that client's sequence);
//   - every version published after the client's position was received unless coalesced:
//     the client received some version ≥ it of the key — or the client holds the key
//     deleted (or never held it) and a tombstone of the key at a version ≥ it was published:
//     a watch shows the list, from which a deleted key is absent, and sends nothing for a key
//     deleted again (a tombstone over a marker, the upserts between them coalesced by the
//     projection), so a deleted key's last version may be older than its marker's;
//   - at a barrier a quarter of the way and at the end it holds the state published, which is
//     what GET /v1/views/orders answers on both replicas: each live key at its version, no
//     deleted key but as deleted.
//
// Positions are MongoDB cluster times, which the test cannot read; a version is "published
// after a position" when its Publish started after the client had the position in hand (the
// answer's headers for a snapshot, which is read before they are sent; the list's answer
// for its Jetbus-Position; the receipt of an event for its id): its write then comes after
// the position.
//
// JETBUS_CHECK_SEED picks another run; JETBUS_CHECK_LOGDIR keeps every process's log there,
// at the level JETBUS_CHECK_LOG_LEVEL names (debug says why a watch's switch waits); a
// client that fails shows its last messages.
func TestWatchChecker(t *testing.T) {
	size := watchCheck
	seed := uint64(27)
	if s, err := strconv.ParseUint(os.Getenv("JETBUS_CHECK_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("%d events over %d keys, %d clients, seed %d", size.events, size.keys, size.clients, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	begin := time.Now()
	phase := func(format string, args ...any) {
		t.Logf("%6.1fs  %s", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}

	bin := filepath.Join(binaries(t, ""), "projector")
	ns := embeddedtest.NATS(t)
	mongoURI, db := wcMongo(t)
	cfg := filepath.Join(t.TempDir(), "jetbus.yaml")
	// watch_buffer is small so that clients that read slowly get coalesced keys; the duplicate
	// window is short so that an event published again with its ID after it is stored again
	// and delivered again.
	require.NoError(t, writeFile(cfg, fmt.Sprintf(`
nats: {urls: [%s]}
mongo: {uri: "%s", database: %s}
http: {watch_buffer: 64}
shutdown: {timeout: 10s}
topics: [{name: orders, partitions: 4, duplicate_window: %s}]
projections: [{name: orders-view, topic: orders, collection: orders, version: /version}]
views: [{name: orders, projection: orders-view, max_limit: 1000}]
`, ns.ClientURL(), mongoURI, db.Name(), wcDupWindow)))
	bus := embeddedtest.Bus(t, ns.ClientURL())
	ctx := context.Background()
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "orders", Partitions: 4, DuplicateWindow: wcDupWindow}))

	h := &wcHarness{t: t, begin: begin, size: size, ledger: &wcLedger{kinds: map[string]map[int64]bool{}, lastTombstone: map[string]int64{}},
		list: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}}
	defer h.list.CloseIdleConnections()
	replicas := [2]*proc{}
	// JETBUS_CHECK_LOGDIR keeps every process's log there, JETBUS_CHECK_LOG_LEVEL sets its
	// level (debug shows why a watch's switch waits).
	logDir, level := os.Getenv("JETBUS_CHECK_LOGDIR"), os.Getenv("JETBUS_CHECK_LOG_LEVEL")
	keepLog := func(name string, p *embeddedtest.Process) {
		if logDir != "" {
			t.Cleanup(func() { _ = os.WriteFile(filepath.Join(logDir, name+".log"), []byte(p.Output().String()), 0o644) })
		}
	}
	withLevel := func(args ...string) []string {
		if level != "" {
			args = append(args, "--log-level", level)
		}
		return args
	}
	starts := 0
	startReplica := func(i int) {
		replicas[i] = start(t, bin, withLevel("run", "--config", cfg, "--http-addr", h.addrs[i])...)
		replicas[i].Name = fmt.Sprintf("projector-%d", i)
		starts++
		keepLog(fmt.Sprintf("projector-%d-%d", i, starts), replicas[i].Process)
		require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
			code, _ := replicas[i].get("/readyz")
			return code == http.StatusOK
		}), "%s ready", replicas[i].Name)
	}
	for i := range replicas {
		h.addrs[i] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		startReplica(i)
		// A process updates the topic's stream as it starts (EnsureTopic), and the embedded
		// nats-server (2.15.2) reads a stream's configuration unlocked while it creates a
		// consumer (fileStore.ConsumerStore against UpdateConfig): the race detector stops
		// the test when both meet. The second replica starts once the first has created the
		// consumer of every partition.
		require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
			c, err := bus.Cursor(ctx, "orders", "orders-view")
			return err == nil && len(c.Partitions) == 4
		}), "the projection consumes every partition")
	}
	phase("replicas ready at %s and %s", h.addrs[0], h.addrs[1])

	// Clients start at random points of the run, a few before the first event.
	type plan struct {
		at   int
		mode string
	}
	plans := make([]plan, size.clients)
	for i := range plans {
		plans[i] = plan{mode: []string{"scratch", "list", "id"}[i%3]}
		if i >= size.clients/4 {
			plans[i].at = rng.IntN(size.events * 9 / 10)
		}
	}
	sort.SliceStable(plans, func(a, b int) bool { return plans[a].at < plans[b].at })
	cctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopClients()
		wg.Wait()
	}()
	startClient := func(i int, mode string) {
		c := newWCClient(h, i, mode, seed)
		h.mu.Lock()
		h.clients = append(h.clients, c)
		h.mu.Unlock()
		wg.Go(func() { c.run(cctx) })
	}

	// The publisher: each key's versions increase, sometimes by 2; one in 12 changes of a live
	// key is a tombstone.
	keys := make([]string, size.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
	}
	final := map[string]wcVersion{}
	var againSameID, storedAgain, againOlder int
	oldest := 0 // entries before it were published at least 3 duplicate windows ago
	publish := func(e wcEntry, id string) *jetbus.Event {
		var payload any
		opts := []jetbus.PublishOption{jetbus.WithKey(e.key), jetbus.WithID(id)}
		if e.del {
			opts = append(opts, jetbus.WithHeaders(map[string]string{"x-version": strconv.FormatInt(e.v, 10)}))
		} else {
			payload = wcPayload(e.key, e.v)
		}
		var ev *jetbus.Event
		require.True(t, embeddedtest.Poll(30*time.Second, 20*time.Millisecond, func() bool {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			ev, err = bus.Publish(pctx, "orders", payload, opts...)
			return err == nil
		}), "publish %s v%d", e.key, e.v)
		return ev
	}
	step := func(i int) {
		k := keys[rng.IntN(len(keys))]
		prev, seen := final[k]
		e := wcEntry{key: k, v: prev.v + 1 + int64(rng.IntN(2)), id: fmt.Sprintf("wc-%d", i), at: time.Now()}
		e.del = seen && !prev.del && rng.IntN(12) == 0
		h.ledger.add(e)
		e.seq = publish(e, e.id).Seq
		h.ledger.setSeq(i, e.seq)
		final[k] = wcVersion{v: e.v, del: e.del}

		// Redeliveries: an event published again with its own ID once the duplicate window
		// passed (stored and delivered again), or an older version again under a new ID (a
		// producer's late retry); either leaves the view as it is.
		for oldest < len(h.ledger.entries) && time.Since(h.ledger.entries[oldest].at) > 3*wcDupWindow {
			oldest++
		}
		switch r := rng.IntN(100); {
		case r < 4 && oldest > 0:
			old := h.ledger.entries[rng.IntN(oldest)]
			againSameID++
			if publish(old, old.id).Seq != old.seq {
				storedAgain++
			}
		case r < 6 && i > 0:
			old := h.ledger.entries[rng.IntN(i)]
			againOlder++
			publish(old, fmt.Sprintf("%s-again-%d", old.id, i))
		}
	}

	barrier := func(name string) {
		phase("barrier %s: publishing paused", name)
		want := map[string]wcVersion{}
		for k, v := range final {
			want[k] = v
		}
		views, clients := h.barrier(name, want)
		phase("barrier %s: the view holds the %d keys published after %s, every client after %s", name, len(want),
			views.Round(time.Millisecond), clients.Round(time.Millisecond))
	}
	at := func(f float64) int { return int(f * float64(size.events)) }
	victim := rng.IntN(2)
	var rebuild *embeddedtest.Process
	var onVictim int
	var activations int64
	hooks := []struct {
		at int
		do func()
	}{
		{at(0.10), func() {
			// Writes that applied but report a write concern error: the projection writes
			// those batches again.
			embeddedtest.InjectMongoFault(t, db.Client(), embeddedtest.MongoFault{Commands: []string{"update"}, Times: 20,
				AppName:           "jetbus projector", // the replicas' (process.ConnectMongo)
				WriteConcernError: &embeddedtest.MongoWriteConcernError{Code: 64, Message: "waiting for replication timed out"}})
			phase("MongoDB: the next 20 updates report a write concern error after they applied")
		}},
		{at(0.20), func() {
			activations = embeddedtest.MongoFailPointActivations(t, db.Client(), "failCommand")
			phase("MongoDB: %d write concern errors reported", activations)
		}},
		{at(0.25), func() { barrier("a quarter") }},
		{at(0.30), func() {
			onVictim = h.connectedTo(victim)
			replicas[victim].Kill()
			phase("SIGKILLed %s with %d clients connected to it", replicas[victim].Name, onVictim)
		}},
		{at(0.45), func() {
			startReplica(victim)
			phase("%s started again", replicas[victim].Name)
		}},
		{at(0.50), func() {
			rebuild = embeddedtest.Start(t, "projector-rebuild", exec.Command(bin, withLevel("rebuild", "--config", cfg,
				"--handover", "30s", "--grace", "10s", "--timeout", "5m", "orders-view")...))
			keepLog("projector-rebuild", rebuild)
			phase("projector rebuild orders-view started")
		}},
	}
	switched := func() bool {
		return rebuild != nil && strings.Contains(rebuild.Output().String(), `"msg":"rebuild switched readers"`)
	}

	// The run goes on past watchCheck.events until the rebuild has switched and a tenth more
	// went to the new generation (written by the replicas, which took it over): the switch
	// happens while events flow.
	next, switchedAt := 0, -1
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick := max(1, size.rate/100)
	deadline := time.Now().Add(5 * time.Minute)
	i := 0
	for i < size.events || switchedAt < 0 || i < switchedAt+size.events/10 {
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild did not switch within 5 minutes: %s", rebuild.Output().Tail(20))
		}
		<-tick.C // pacing the load, not waiting for anything
		for range perTick {
			for len(hooks) > 0 && hooks[0].at == i {
				hooks[0].do()
				hooks = hooks[1:]
			}
			for next < len(plans) && plans[next].at == i {
				startClient(next, plans[next].mode)
				next++
			}
			step(i)
			if i++; switchedAt < 0 && i%50 == 0 && switched() {
				switchedAt = i
				phase("the rebuild switched readers to generation 1, %d versions in", i)
			}
		}
	}
	phase("%d versions published, %d again with their ID after the duplicate window (%d stored again), %d older ones again",
		i, againSameID, storedAgain, againOlder)
	require.True(t, rebuild.Wait(3*time.Minute), "the rebuild ends after its grace period")
	require.Equal(t, 0, rebuild.ExitCode(), "rebuild: %s", rebuild.Output().Tail(20))
	require.Contains(t, rebuild.Output().String(), "rebuilt orders-view: generation 1, collection orders-g1")
	phase("the rebuild removed generation 0 and exited")
	barrier("the end")
	stopClients()
	wg.Wait()

	// Every version published after a client's position reached it, or a later one did
	// (coalesced).
	var msgs, resumes, switches, overflows, snapshots, cuts, coalesced int
	for _, c := range h.clients {
		c.mu.Lock()
		missed, skipped := 0, 0
		if c.mark < 0 {
			c.mark = len(h.ledger.entries) // it never got an answer
		}
		for _, e := range h.ledger.entries[c.mark:] {
			held, holds := c.holding(e.key)
			covered := c.last[e.key] >= e.v || (!holds || held.del) && h.ledger.lastTombstone[e.key] >= e.v
			switch got := c.got[e.key]; {
			case !covered:
				if missed++; missed <= 5 {
					t.Errorf("client %d (%s, from entry %d): key %s: version %d was published after its position; it received up to %d",
						c.i, c.origin, c.mark, e.key, e.v, c.last[e.key])
				}
			case !slices.Contains(got, e.v):
				skipped++
			}
		}
		t.Logf("client %2d %-9s slow=%-5v from entry %5d: %6d messages, %3d resumes, %d snapshots (%d cut), %d switches, %d overflows; of the %d versions after its position %d coalesced, %d missed",
			c.i, c.origin, c.slow, c.mark, c.msgs, c.resumes, c.snapshots, c.cuts, c.switches, c.overflows, len(h.ledger.entries)-c.mark, skipped, missed)
		msgs, resumes, switches, overflows, snapshots = msgs+c.msgs, resumes+c.resumes, switches+c.switches, overflows+c.overflows, snapshots+c.snapshots
		cuts, coalesced = cuts+c.cuts, coalesced+skipped
		c.mu.Unlock()
	}
	stale, dead := 0, 0
	for _, p := range replicas {
		_, m := p.get("/metrics")
		stale += metricValue(m, "projection_events_total", `outcome="stale"`)
		dead += metricValue(m, "projection_events_total", `outcome="dead_lettered"`)
	}
	phase("%d messages, %d resumes, %d snapshots (%d cut and resumed midway), %d switches followed, %d overflows, %d versions coalesced; "+
		"%d stale events on the running replicas", msgs, resumes, snapshots, cuts, switches, overflows, coalesced, stale)
	assert.Positive(t, activations, "MongoDB reported write concern errors")
	assert.Positive(t, storedAgain, "events were delivered again")
	assert.Positive(t, stale, "the replicas saw events older than the view")
	assert.Zero(t, dead, "no event was dead-lettered")
	assert.Positive(t, onVictim, "clients were connected to the replica killed")
	assert.Positive(t, switches, "clients followed the rebuild's switch")
	assert.Positive(t, coalesced, "clients were sent a key's latest version only")
}

// wcMongo returns the MongoDB deployment of the test and a database on it: the one
// JETBUS_TEST_MONGO_URI names, or the test backend with an oplog of a million changes, as a
// deployment sizes it for hours of writes. The backend's default (10,000) is less than what
// the rebuild of the full run writes in a second, and a client a second behind would find
// its position gone (410), which is what it should find, but not what this test checks.
func wcMongo(t *testing.T) (string, *mongo.Database) {
	uri := os.Getenv(embeddedtest.MongoURIEnv)
	if uri == "" {
		s, err := minimongo.Start(minimongo.Options{OplogSize: 1 << 20})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		uri = s.URI()
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(fmt.Sprintf("watchcheck%d", time.Now().UnixNano()))
	if os.Getenv(embeddedtest.MongoURIEnv) != "" {
		t.Cleanup(func() { _ = db.Drop(context.Background()) })
	}
	return uri, db
}

// wcDupWindow is the topic's duplicate window.
const wcDupWindow = time.Second

var wcStatuses = []string{"open", "paid", "shipped"}

// wcPayload is version v of key's document: each field derived from the key and version,
// so that a document received shows which version it is.
func wcPayload(key string, v int64) map[string]any {
	return map[string]any{"version": v, "key": key, "n": wcN(key, v), "status": wcStatuses[v%3]}
}

func wcN(key string, v int64) int64 { return v*7919 + int64(len(key))*int64(key[len(key)-1]) }

// wcDoc is a document as a watch renders it.
type wcDoc struct {
	ID      string `json:"_id"`
	Key     string `json:"key"`
	Version int64  `json:"version"`
	N       int64  `json:"n"`
	Status  string `json:"status"`
}

// wcEntry is a version published.
type wcEntry struct {
	key string
	v   int64
	del bool
	id  string
	seq uint64
	at  time.Time
}

// wcVersion is a key's version as published or held: deleted for a tombstone.
type wcVersion struct {
	v   int64
	del bool
}

// wcLedger is every new version published, in publish order. Only the publisher writes it.
type wcLedger struct {
	mu            sync.RWMutex
	entries       []wcEntry
	kinds         map[string]map[int64]bool // key → version → tombstone
	lastTombstone map[string]int64          // key → its last tombstone's version
	n             atomic.Int64              // len(entries): stored after an entry is added, before it is published
}

func (l *wcLedger) add(e wcEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	if l.kinds[e.key] == nil {
		l.kinds[e.key] = map[int64]bool{}
	}
	l.kinds[e.key][e.v] = e.del
	if e.del {
		l.lastTombstone[e.key] = e.v
	}
	l.mu.Unlock()
	l.n.Store(int64(len(l.entries)))
}

func (l *wcLedger) setSeq(i int, seq uint64) {
	l.mu.Lock()
	l.entries[i].seq = seq
	l.mu.Unlock()
}

// kind says whether version v of key was published, and as a tombstone.
func (l *wcLedger) kind(key string, v int64) (del, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	del, ok = l.kinds[key][v]
	return del, ok
}

// wcHarness is what the clients share: the replicas' addresses and the ledger.
type wcHarness struct {
	t      *testing.T
	begin  time.Time
	size   watchCheckSize
	ledger *wcLedger
	addrs  [2]string
	list   *http.Client

	mu      sync.Mutex
	clients []*wcClient
}

func (h *wcHarness) all() []*wcClient {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*wcClient(nil), h.clients...)
}

// connectedTo counts the clients streaming from replica i.
func (h *wcHarness) connectedTo(i int) int {
	n := 0
	for _, c := range h.all() {
		if c.on.Load() == int32(i) {
			n++
		}
	}
	return n
}

// readList reads the whole view from the replica at addr, page by page: each key's version,
// the first page's Jetbus-Position, and the ledger's length once that page was answered.
func (h *wcHarness) readList(ctx context.Context, addr string) (map[string]int64, string, int64, error) {
	items := map[string]int64{}
	var pos string
	var mark int64
	cursor := ""
	for {
		url := "http://" + addr + "/v1/views/orders?meta=1&limit=1000"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, "", 0, err
		}
		res, err := h.list.Do(req)
		if err != nil {
			return nil, "", 0, err
		}
		if pos == "" {
			pos, mark = res.Header.Get("Jetbus-Position"), h.ledger.n.Load()
		}
		var page struct {
			Items []struct {
				ID string `json:"_id"`
				V  int64  `json:"_v"`
			} `json:"items"`
			Next string `json:"next"`
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return nil, "", 0, fmt.Errorf("GET %s: %d", url, res.StatusCode)
		}
		if err != nil {
			return nil, "", 0, err
		}
		for _, it := range page.Items {
			items[it.ID] = it.V
		}
		if page.Next == "" {
			return items, pos, mark, nil
		}
		cursor = page.Next
	}
}

// barrier waits, with nothing being published, until the view on every replica and every
// client hold want; it says how long each took.
func (h *wcHarness) barrier(name string, want map[string]wcVersion) (views, clients time.Duration) {
	begin := time.Now()
	t := h.t
	t.Helper()
	live := map[string]int64{}
	for k, v := range want {
		if !v.del {
			live[k] = v.v
		}
	}
	for _, addr := range h.addrs {
		var got map[string]int64
		var err error
		ok := embeddedtest.Poll(2*time.Minute, 50*time.Millisecond, func() bool {
			got, _, _, err = h.readList(context.Background(), addr)
			return err == nil && fmt.Sprint(got) == fmt.Sprint(live)
		})
		require.True(t, ok, "barrier %s: the view on %s holds what was published: %v; %s", name, addr, err, diffVersions(live, got))
	}
	views = time.Since(begin)
	var why string
	var stuck *wcClient
	ok := embeddedtest.Poll(2*time.Minute, 50*time.Millisecond, func() bool {
		for _, c := range h.all() {
			if c.dead.Load() {
				continue
			}
			if ok, w := c.holds(want); !ok {
				stuck, why = c, w
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("barrier %s: client %d (%s) does not hold what was published: %s", name, stuck.i, stuck.describe(), why)
	}
	return views, time.Since(begin)
}

// diffVersions describes how got differs from want (a few keys).
func diffVersions(want, got map[string]int64) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			out = append(out, fmt.Sprintf("%s: want %d, got %d (present %v)", k, v, g, ok))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: not published live, got %d", k, g))
		}
	}
	sort.Strings(out)
	return fmt.Sprintf("%d keys differ: %s", len(out), strings.Join(out[:min(len(out), 5)], "; "))
}

// wcCheckpoint is a client's state at one of its ids, for another client to start from.
type wcCheckpoint struct {
	id    string
	mark  int64
	at    time.Time
	last  map[string]int64
	state map[string]wcVersion
}

// wcClient is one SSE client: what it received, per key.
type wcClient struct {
	h    *wcHarness
	i    int
	mode string // scratch, list (since= a list's position) or id (since= another client's id)
	slow bool   // a small receive buffer, and stalls: the server coalesces its keys
	rng  *rand.Rand
	http *http.Client
	on   atomic.Int32 // the replica it streams from, -1 none
	dead atomic.Bool  // it gave up after an error (the test failed)

	mu     sync.Mutex
	mark   int                  // versions of the ledger from this one on are after its position
	last   map[string]int64     // the last version of its sequence, per key
	got    map[string][]int64   // the versions it received itself, per key, in order
	state  map[string]wcVersion // what it holds, per key
	base   map[string]wcVersion // a list client's pages
	lastID string
	idMark int64 // the ledger's length when lastID came
	cps    []wcCheckpoint
	origin string // where it started from
	errs   atomic.Int32

	synced bool // the stream read now sent synced
	conns  int  // connections opened
	hist   []string
	dumped bool

	msgs, resumes, switches, overflows, snapshots, cuts int
}

// wcCheckpointEvery is how many messages a client receives between two checkpoints; it keeps
// the last wcCheckpoints.
const (
	wcCheckpointEvery = 97
	wcCheckpoints     = 4
)

func newWCClient(h *wcHarness, i int, mode string, seed uint64) *wcClient {
	c := &wcClient{h: h, i: i, mode: mode, slow: i%4 == 3, rng: rand.New(rand.NewPCG(seed, uint64(100+i))),
		last: map[string]int64{}, got: map[string][]int64{}, state: map[string]wcVersion{}}
	c.on.Store(-1)
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	c.http = &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true, ResponseHeaderTimeout: 30 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil && c.slow {
				// Small, but not below 32 KiB: on loopback (64 KiB segments) a smaller window
				// stalls on delayed acknowledgements, and the client could never keep up.
				_ = conn.(*net.TCPConn).SetReadBuffer(32 << 10)
			}
			return conn, err
		}}}
	return c
}

// fail reports an error of the client's (the first ten).
func (c *wcClient) fail(format string, args ...any) {
	c.h.t.Helper()
	if c.errs.Add(1) <= 10 {
		c.h.t.Errorf("client %d (%s): %s", c.i, c.mode, fmt.Sprintf(format, args...))
	}
}

// describe says where the client started from.
func (c *wcClient) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin
}

// run watches until ctx ends: it starts as its mode says, then reads each stream until it
// ends or until a random number of messages came, and resumes with its last id on the
// other replica.
func (c *wcClient) run(ctx context.Context) {
	defer c.http.CloseIdleConnections()
	since := ""
	switch c.mode {
	case "list":
		if since = c.fromList(ctx); since == "" {
			return
		}
	case "id":
		since = c.adopt()
	}
	if since == "" {
		c.mu.Lock()
		c.mark, c.origin = -1, "scratch" // the mark is set when the first answer comes
		c.mu.Unlock()
	}
	replica := c.rng.IntN(2)
	for ctx.Err() == nil && !c.dead.Load() {
		res, cancel := c.open(ctx, &replica, since)
		if res == nil {
			return
		}
		c.mu.Lock()
		fresh := since == "" && c.lastID == "" // a snapshot first: often cut midway
		c.synced = false
		c.mu.Unlock()
		quota := 1 + c.rng.IntN(3*c.h.size.keys)
		if fresh {
			quota = 1 + c.rng.IntN(c.h.size.keys)
		}
		c.on.Store(int32(replica))
		why, n := c.read(res.Body, quota)
		c.on.Store(-1)
		cancel()
		_ = res.Body.Close()
		if why == "expired" {
			c.dead.Store(true)
			return
		}
		c.mu.Lock()
		c.resumes++
		if fresh && n > 0 && !c.synced {
			c.cuts++
		}
		c.mu.Unlock()
		replica = 1 - replica
	}
}

// fromList reads the whole list and returns its Jetbus-Position.
func (c *wcClient) fromList(ctx context.Context) string {
	var pos string
	ok := embeddedtest.Poll(time.Minute, 20*time.Millisecond, func() bool {
		items, p, mark, err := c.h.readList(ctx, c.h.addrs[c.rng.IntN(2)])
		if err != nil || ctx.Err() != nil {
			return ctx.Err() != nil
		}
		if p == "" {
			c.fail("the list has no Jetbus-Position")
			return true
		}
		c.mu.Lock()
		c.base = map[string]wcVersion{}
		for k, v := range items {
			c.base[k] = wcVersion{v: v}
		}
		c.mark, c.origin = int(mark), "list"
		c.mu.Unlock()
		pos = p
		return true
	})
	if !ok {
		c.fail("no replica answered the list")
	}
	return pos
}

// adopt starts from another client's id (its latest, or a checkpoint of the last 2 s),
// continuing its sequence and taking the state it had there; a client that finds none
// starts from scratch.
func (c *wcClient) adopt() string {
	others := c.h.all()
	c.rng.Shuffle(len(others), func(a, b int) { others[a], others[b] = others[b], others[a] })
	for _, o := range others {
		if o == c {
			continue
		}
		o.mu.Lock()
		var cp wcCheckpoint
		if c.rng.IntN(2) == 0 && o.lastID != "" && o.on.Load() >= 0 {
			cp = o.checkpoint()
		} else if len(o.cps) > 0 {
			if p := o.cps[c.rng.IntN(len(o.cps))]; time.Since(p.at) < 2*time.Second {
				cp = p
			}
		}
		o.mu.Unlock()
		if cp.id == "" {
			continue
		}
		c.mu.Lock()
		c.last, c.state, c.mark, c.lastID, c.idMark = cp.last, cp.state, int(cp.mark), cp.id, cp.mark
		c.origin = fmt.Sprintf("id of %d", o.i)
		c.mu.Unlock()
		return cp.id
	}
	return ""
}

// checkpoint copies c's state at its last id; c.mu is held.
func (c *wcClient) checkpoint() wcCheckpoint {
	cp := wcCheckpoint{id: c.lastID, mark: c.idMark, at: time.Now(), last: make(map[string]int64, len(c.last)),
		state: make(map[string]wcVersion, len(c.state)+len(c.base))}
	for k, v := range c.last {
		cp.last[k] = v
	}
	for k, v := range c.base {
		cp.state[k] = v
	}
	for k, v := range c.state {
		if b, ok := cp.state[k]; !ok || v.v > b.v {
			cp.state[k] = v
		}
	}
	return cp
}

// open opens a watch on *replica, or on the other one when that one does not answer,
// with the client's last id; nil when ctx ended or the client gave up.
func (c *wcClient) open(ctx context.Context, replica *int, since string) (*http.Response, context.CancelFunc) {
	var res *http.Response
	var cancel context.CancelFunc
	ok := embeddedtest.Poll(time.Minute, 20*time.Millisecond, func() bool {
		if ctx.Err() != nil {
			return true
		}
		url := "http://" + c.h.addrs[*replica] + "/v1/views/orders?watch=true"
		if since != "" {
			url += "&since=" + since
		}
		var rctx context.Context
		rctx, cancel = context.WithCancel(ctx)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			panic(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		c.mu.Lock()
		if c.lastID != "" {
			req.Header.Set("Last-Event-ID", c.lastID)
		}
		c.mu.Unlock()
		r, err := c.http.Do(req)
		if err != nil {
			cancel()
			*replica = 1 - *replica
			return false
		}
		if r.StatusCode == http.StatusServiceUnavailable {
			_ = r.Body.Close()
			cancel()
			*replica = 1 - *replica
			return false
		}
		if r.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			cancel()
			c.mu.Lock()
			hist := c.history()
			c.mu.Unlock()
			c.fail("%s (Last-Event-ID %v): %d %s%s", url, c.lastID != "", r.StatusCode, body, hist)
			c.dead.Store(true)
			return true
		}
		c.mu.Lock()
		if c.mark < 0 {
			c.mark = int(c.h.ledger.n.Load()) // the snapshot was read before the answer's headers were sent
		}
		c.mu.Unlock()
		c.mu.Lock()
		c.conns++
		c.hist = append(c.hist, fmt.Sprintf("%7.3fs conn %d to replica %d, since %v, Last-Event-ID %08x", time.Since(c.h.begin).Seconds(),
			c.conns, *replica, since != "", idHash(req.Header.Get("Last-Event-ID"))))
		c.mu.Unlock()
		res = r
		return true
	})
	if !ok {
		c.fail("no replica answered a watch for a minute")
		c.dead.Store(true)
	}
	if res == nil {
		return nil, nil
	}
	return res, cancel
}

// wcBlock is one block of a text/event-stream.
type wcBlock struct {
	id, event, data string
	hasID           bool
	comments        []string
}

// read parses one stream until it ends ("eof", "overflow", "disconnect", "expired") or
// quota messages came ("quota"); it returns why, and how many messages came.
func (c *wcClient) read(body io.Reader, quota int) (string, int) {
	r := bufio.NewReaderSize(body, 64<<10)
	var b wcBlock
	n := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "eof", n // the server ended it, died, or the client left
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if why := c.dispatch(b); why != "" {
				return why, n
			}
			if b.event == "upsert" || b.event == "delete" {
				if n++; n >= quota {
					return "quota", n
				}
				if c.slow && n%400 == 0 {
					time.Sleep(200 * time.Millisecond) // a reader that stalls: the server's writes wait
				}
			}
			b = wcBlock{}
			continue
		}
		if cm, ok := strings.CutPrefix(line, ":"); ok {
			b.comments = append(b.comments, strings.TrimPrefix(cm, " "))
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			b.id, b.hasID = value, true
		case "event":
			b.event = value
		case "data":
			if b.data != "" {
				b.data += "\n"
			}
			b.data += value
		}
	}
}

// dispatch takes one block: it returns why the stream ends, or "".
func (c *wcClient) dispatch(b wcBlock) string {
	c.record(b)
	switch b.event {
	case "upsert", "delete":
		c.apply(b)
		return ""
	case "overflow":
		c.mu.Lock()
		c.overflows++
		c.mu.Unlock()
		return "overflow"
	case "disconnect":
		if strings.Contains(b.data, `"position_expired"`) {
			c.mu.Lock()
			hist := c.history()
			c.mu.Unlock()
			c.fail("disconnect: %s%s", b.data, hist)
			return "expired"
		}
		return "disconnect"
	case "synced", "":
	default:
		c.fail("unknown event %q", b.event)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cm := range b.comments {
		if cm == "generation switched" {
			c.switches++
		}
	}
	if b.event == "synced" {
		c.snapshots++
		c.synced = true
	}
	if b.hasID {
		c.setID(b.id)
	}
	return ""
}

// record keeps b in the client's recent history, shown when it fails.
func (c *wcClient) record(b wcBlock) {
	var p struct {
		Key string `json:"key"`
		V   *int64 `json:"v"`
	}
	_ = json.Unmarshal([]byte(b.data), &p)
	line := fmt.Sprintf("%7.3fs conn %d (replica %d) id %08x %s %s", time.Since(c.h.begin).Seconds(), c.conns, c.on.Load(), idHash(b.id), b.event, p.Key)
	if p.V != nil {
		line += fmt.Sprintf(" v%d", *p.V)
	}
	if !b.hasID {
		line = strings.Replace(line, fmt.Sprintf(" id %08x ", idHash("")), " no id ", 1)
	}
	if len(b.comments) > 0 {
		line += fmt.Sprintf(" %q", b.comments)
	}
	c.mu.Lock()
	c.hist = append(c.hist, line)
	if len(c.hist) > 40 {
		c.hist = c.hist[len(c.hist)-40:]
	}
	c.mu.Unlock()
}

// idHash names an id (or a position) shortly in a client's history.
func idHash(id string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()
}

// history is the client's recent history; c.mu is held.
func (c *wcClient) history() string {
	if c.dumped {
		return ""
	}
	c.dumped = true
	return "\n  its last messages:\n    " + strings.Join(c.hist, "\n    ")
}

// setID records the id of the block just taken; c.mu is held.
func (c *wcClient) setID(id string) {
	c.lastID, c.idMark = id, c.h.ledger.n.Load()
}

// apply takes an upsert or a delete: it checks it against what was published and against
// what the client received before.
func (c *wcClient) apply(b wcBlock) {
	var p struct {
		Key string          `json:"key"`
		V   *int64          `json:"v"`
		Doc json.RawMessage `json:"doc"`
	}
	if err := json.Unmarshal([]byte(b.data), &p); err != nil {
		c.fail("%s: %v: %s", b.event, err, b.data)
		return
	}
	if !b.hasID {
		c.fail("%s without an id: %s", b.event, b.data)
	}
	if p.V == nil {
		c.fail("%s without a version: %s", b.event, b.data)
		return
	}
	v, del := *p.V, b.event == "delete"
	switch pubDel, ok := c.h.ledger.kind(p.Key, v); {
	case !ok:
		c.fail("key %s: version %d was never published (%s)", p.Key, v, b.event)
	case pubDel != del:
		c.fail("key %s: version %d was published as a tombstone: %v; received as %s", p.Key, v, pubDel, b.event)
	}
	if !del {
		var d wcDoc
		if err := json.Unmarshal(p.Doc, &d); err != nil {
			c.fail("key %s: version %d: document %s: %v", p.Key, v, p.Doc, err)
		} else if want := (wcDoc{ID: p.Key, Key: p.Key, Version: v, N: wcN(p.Key, v), Status: wcStatuses[v%3]}); d != want {
			c.fail("key %s: version %d: document %+v, published %+v", p.Key, v, d, want)
		}
	} else if len(p.Doc) > 0 {
		c.fail("key %s: a delete with a document: %s", p.Key, b.data)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs++
	if last := c.last[p.Key]; v <= last {
		c.fail("key %s went from %d to %d (%s)%s", p.Key, last, v, b.event, c.history())
	} else {
		c.last[p.Key] = v
		c.got[p.Key] = append(c.got[p.Key], v)
		c.state[p.Key] = wcVersion{v: v, del: del}
	}
	if b.hasID {
		c.setID(b.id)
	}
	if c.msgs%wcCheckpointEvery == 0 {
		if len(c.cps) == wcCheckpoints {
			c.cps = c.cps[1:]
		}
		c.cps = append(c.cps, c.checkpoint())
	}
}

// holding is what the client holds of key (its pages' version, or what it received after);
// c.mu is held.
func (c *wcClient) holding(key string) (wcVersion, bool) {
	got, ok := c.state[key]
	if b, bok := c.base[key]; bok && (!ok || b.v > got.v) {
		got, ok = b, true
	}
	return got, ok
}

// holds reports whether the client holds want (a key deleted in want: not held, or held
// deleted at that version), and if not, how it differs.
func (c *wcClient) holds(want map[string]wcVersion) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var diff []string
	for k, w := range want {
		got, ok := c.holding(k)
		switch {
		case w.del && (!ok || got.del): // a key deleted again: not sent (see TestWatchChecker)
		case !w.del && ok && got == w:
		default:
			diff = append(diff, fmt.Sprintf("%s: want %+v, holds %+v (%v)", k, w, got, ok))
		}
	}
	if len(diff) == 0 {
		return true, ""
	}
	sort.Strings(diff)
	return false, fmt.Sprintf("%d keys differ: %s", len(diff), strings.Join(diff[:min(5, len(diff))], "; "))
}

// metricValue sums the samples of a counter whose labels contain label.
func metricValue(metrics, name, label string) int {
	re := regexp.MustCompile(`(?m)^` + name + `\{([^}]*)\} ([0-9.e+]+)$`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(metrics, -1) {
		if strings.Contains(m[1], label) {
			f, _ := strconv.ParseFloat(m[2], 64)
			n += int(f)
		}
	}
	return n
}
