package cmdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/internal/ops"
)

// watchKeys is the number of documents of the watched view: fewer than http.watch_buffer
// (1024), so that a watcher's buffer never fills and a slow one is coalesced, not cut off.
const watchKeys = 1000

// TestWatchLoad runs watchClients Server-Sent Events clients, each on its own connection,
// watching a 1,000-document view of one projector process (production build), plus one
// probe client in a process of its own; NATS and the MongoDB test backend run in a process
// of their own too (watchBackendsEnv says why). It measures:
//
//   - the latency from the projection's MongoDB commit to the client: the test reads a
//     change stream of its own on the view's collection, whose events carry each write's
//     wallTime (when MongoDB committed it), and matches every message a client receives, by
//     key and version, to that write. wallTime is in milliseconds, truncated: a latency is
//     at most 1 ms more than the true one, never less. First at a steady watchSteadyRate
//     events a second for watchSteadyFor, then during the bursts below. The clients share the
//     test process with NATS, the MongoDB test backend and the publisher; the probe does not.
//   - the projector's throughput with and without watchers, in the same run: rounds that
//     publish watchRoundEvents events as fast as the test can, alternately with no watcher
//     (nor any change stream of the watches left: the hub lingers 30 s after its last
//     watcher, and the round waits for it to stop) and with every watcher connected; a
//     round's rate is its events over the time from its first publish to the commit of the
//     last write it caused.
//
// Every client ends each phase with the latest version of every key, receives each key's
// versions in increasing order, and receives no version that was not committed. The
// figures are logged and written to JETBUS_WATCH_LOAD_RESULTS (BENCHMARKS.md keeps the
// full run's); they are measured, not asserted. JETBUS_WATCH_CLIENTS, JETBUS_WATCH_RATE,
// JETBUS_WATCH_STEADY, JETBUS_WATCH_EVENTS, JETBUS_WATCH_PAIRS and JETBUS_WATCH_WAVE (the
// clients connecting at once) override the parameters; JETBUS_WATCH_TAGS builds the
// projector with build tags.
func TestWatchLoad(t *testing.T) {
	clients, rate, steadyFor, roundEvents, pairs, wave := watchClients, watchSteadyRate, watchSteadyFor, watchRoundEvents, watchRoundPairs, 200
	envInt := func(name string, v *int) {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
			*v = n
		}
	}
	envInt("JETBUS_WATCH_CLIENTS", &clients)
	envInt("JETBUS_WATCH_RATE", &rate)
	envInt("JETBUS_WATCH_EVENTS", &roundEvents)
	envInt("JETBUS_WATCH_PAIRS", &pairs)
	envInt("JETBUS_WATCH_WAVE", &wave)
	if d, err := time.ParseDuration(os.Getenv("JETBUS_WATCH_STEADY")); err == nil && d > 0 {
		steadyFor = d
	}
	raiseFileLimit(t, uint64(clients)+1024)

	bin := binaries(t, os.Getenv("JETBUS_WATCH_TAGS"))
	natsURL, mongoURI, backends := startWatchBackends(t)
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	require.NoError(t, err)
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database("watchload")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const token = "watch-load-token-0123456789"
	// The defaults of http.max_watchers (4096) and http.max_connections (8192) admit 2,000
	// watchers; more clients raise them.
	cfg := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, writeFile(cfg, fmt.Sprintf(`
mongo: {database: %s}
http: {max_watchers: %d, max_connections: %d}
topics: [{name: orders, partitions: 4}]
projections: [{name: orders-view, topic: orders, collection: orders}]
views: [{name: orders, projection: orders-view}]
auth: {tokens: [{name: load, token: %s, views: [orders, ops]}]}
`, db.Name(), max(4096, clients+1), max(8192, clients+100), token)))
	p := start(t, filepath.Join(bin, "projector"), "run", "--config", cfg, "--nats-url", natsURL,
		"--mongo-uri", mongoURI, "--http-addr", "127.0.0.1:0")
	require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK }),
		"the projector is ready; stderr:\n%s", p.stderr)
	pid := p.Cmd.Process.Pid
	lt := &watchLoad{t: t, base: "http://" + p.addr, token: token, commits: newCommitLog(),
		cl: &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}}
	for i := range clients {
		lt.clients = append(lt.clients, &watchClient{id: i})
	}
	t.Cleanup(lt.stop) // on a failure too: the probe is a process
	t.Logf("projector at %s (pid %d)", lt.base, pid)

	// The commits: every write to the view's collection, with its wallTime.
	cs, err := db.Collection("orders").Watch(ctx, mongo.Pipeline{{{Key: "$project", Value: bson.D{
		{Key: "documentKey", Value: 1}, {Key: "wallTime", Value: 1},
		{Key: "updateDescription.updatedFields._v", Value: 1}, {Key: "fullDocument._v", Value: 1}}}}},
		options.ChangeStream().SetBatchSize(1000))
	require.NoError(t, err)
	commitsDone := make(chan error, 1)
	go func() { commitsDone <- lt.commits.follow(ctx, cs) }()
	defer func() {
		cancel()
		if err := <-commitsDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the test's change stream: %v", err)
		}
	}()

	bus := embeddedtest.Bus(t, natsURL)
	rng := rand.New(rand.NewPCG(27, 2000))
	// publish publishes n events (on key o-i for the i-th when seq, else on random keys),
	// paced at perSecond when it is not 0, and returns each key's last version, when it
	// began and how long it took.
	publish := func(n, perSecond int, seq bool) (map[int]int64, time.Time, time.Duration) {
		t.Helper()
		const window = 1000 // publishes awaiting their acknowledgement
		futures := make([]jetbus.PublishFuture, 0, window)
		last := map[int]int64{}
		await := func(f jetbus.PublishFuture) {
			ev, err := f.Wait(ctx)
			require.NoError(t, err)
			k, _ := strconv.Atoi(strings.TrimPrefix(ev.Key, "o-"))
			last[k] = max(last[k], int64(ev.Seq))
		}
		var tick *time.Ticker
		if perSecond > 0 {
			tick = time.NewTicker(time.Second / time.Duration(perSecond))
			defer tick.Stop()
		}
		begin := time.Now()
		for i := range n {
			k := i
			if !seq {
				k = rng.IntN(watchKeys)
			}
			if len(futures) == window {
				await(futures[0])
				futures = futures[1:]
			}
			body := json.RawMessage(fmt.Sprintf(`{"status":%q,"total":%d,"n":%d}`, []string{"open", "paid", "shipped"}[i%3], rng.IntN(100000), i))
			f, err := bus.PublishAsync(ctx, "orders", body, jetbus.WithKey(watchKey(k)))
			require.NoError(t, err)
			futures = append(futures, f)
			if tick != nil {
				<-tick.C
			}
		}
		for _, f := range futures {
			await(f)
		}
		return last, begin, time.Since(begin)
	}
	// applied waits until every key's last version is committed and returns the latest
	// wallTime among those commits.
	applied := func(last map[int]int64) time.Time {
		t.Helper()
		var end time.Time
		require.True(t, embeddedtest.Poll(watchLoadDeadline, 5*time.Millisecond, func() bool {
			end = time.Time{}
			for k, v := range last {
				w, ok := lt.commits.at(k, v)
				if !ok {
					return false
				}
				if w.After(end) {
					end = w
				}
			}
			return true
		}), "the projection applies every event")
		return end
	}
	// lagZero waits until the projector's group has no lag.
	lagZero := func() {
		t.Helper()
		var last string
		require.True(t, embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
			code, body := lt.get("/v1/ops/status")
			last = body
			var st ops.Status
			if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
				return false
			}
			for _, g := range st.Groups {
				if g.Group == "orders-view" {
					return g.Lag == 0
				}
			}
			return false
		}), "the group's lag reaches 0: %s", last)
	}

	// Seed: one event per key.
	last, _, _ := publish(watchKeys, 0, true)
	applied(last)
	lagZero()

	rss := &rssSampler{pid: pid}
	defer rss.run()()
	var connects []time.Duration
	// connect connects the clients in waves, each from a snapshot, waiting until each wave
	// received its snapshot and synced; then the probe.
	connect := func() {
		t.Helper()
		begin := time.Now()
		lt.begin(ctx)
		for i := 0; i < len(lt.clients); i += wave {
			cs := lt.clients[i:min(i+wave, len(lt.clients))]
			lt.start(cs)
			require.True(t, embeddedtest.Poll(watchLoadDeadline, 20*time.Millisecond, func() bool {
				for _, c := range cs {
					if !c.synced.Load() {
						return false
					}
				}
				return true
			}), "every watcher receives its snapshot and synced")
		}
		connects = append(connects, time.Since(begin))
		lt.startProbe(t)
		require.True(t, embeddedtest.Poll(watchLoadDeadline, 20*time.Millisecond, lt.probe.c.synced.Load), "the probe receives its snapshot and synced")
	}
	disconnect := func() {
		t.Helper()
		lt.stop()
		// The hub lingers after its last watcher (30 s): a round without watchers waits
		// until no change stream of the watches is left.
		require.True(t, embeddedtest.Poll(2*time.Minute, 100*time.Millisecond, func() bool {
			_, metrics := lt.get("/metrics")
			return strings.Contains(metrics, "\nsnapshotapi_watch_streams 0\n") &&
				strings.Contains(metrics, "\nsnapshotapi_watchers{view=\"orders\"} 0\n")
		}), "the watches' streams close after the last watcher left")
	}

	var phases []*watchPhase
	// measure runs work as a phase; with watchers it then waits until every client has
	// the latest version of every key, and gathers what they received.
	measure := func(ph *watchPhase, work func(ph *watchPhase)) {
		t.Helper()
		ph.index = len(phases)
		phases = append(phases, ph)
		lt.phase.Store(int32(ph.index))
		t.Logf("%s, %d watchers: begins", ph.name, ph.watchers)
		c0, cpu0, self0, back0, st0 := lt.commits.count(), processCPU(pid), selfCPU(), processCPU(backends), lt.streamTotals()
		cu0 := lt.catchUps()
		busy0, all0 := machineBusy()
		rss.reset()
		begin := time.Now()
		work(ph)
		if ph.watchers > 0 {
			want := map[int]int64{}
			for k := range watchKeys {
				want[k] = lt.commits.last(k)
			}
			all := append(slices.Clone(lt.clients), lt.probe.c)
			if !embeddedtest.Poll(watchLoadDeadline, 20*time.Millisecond, func() bool {
				for _, c := range all {
					if !c.has(want) {
						return false
					}
				}
				return true
			}) {
				for _, c := range all {
					if !c.has(want) {
						t.Errorf("%s: client %d lacks the latest versions (%s)", ph.name, c.id, c.missing(want))
						break
					}
				}
			}
		}
		ph.took, ph.writes = time.Since(begin), lt.commits.count()-c0
		busy1, all1 := machineBusy()
		ph.cpu, ph.self, ph.backends, ph.rss = processCPU(pid)-cpu0, selfCPU()-self0, processCPU(backends)-back0, rss.max()
		ph.streams = lt.streamTotals().minus(st0)
		cu1 := lt.catchUps()
		ph.catchUps = [2]int64{cu1[0] - cu0[0], cu1[1] - cu0[1]}
		ph.busy, ph.cores = busy1-busy0, float64(all1-all0)/float64(ph.took)
		if ph.watchers > 0 {
			ph.hist = &latHist{}
			for _, c := range lt.clients {
				h, n := c.collect(lt, ph.index)
				ph.hist.merge(h)
				ph.perClient = append(ph.perClient, n)
			}
			ph.probe, _ = lt.probe.c.collect(lt, ph.index)
		}
	}
	bursts := 0
	round := func(watchers int) {
		t.Helper()
		bursts++
		measure(&watchPhase{name: fmt.Sprintf("burst %d", bursts), watchers: watchers, events: roundEvents}, func(ph *watchPhase) {
			last, begin, took := publish(roundEvents, 0, false)
			ph.publish = took
			ph.apply = applied(last).Sub(begin)
			lagZero()
		})
	}

	round(0)
	connect()
	steadyEvents := int(steadyFor.Seconds() * float64(rate))
	measure(&watchPhase{name: "steady", watchers: clients, events: steadyEvents, steady: rate}, func(ph *watchPhase) {
		_, _, ph.publish = publish(steadyEvents, rate, false)
	})
	for i := range pairs {
		if i > 0 {
			disconnect()
			round(0)
			connect()
		}
		round(clients)
	}
	lt.stop()

	var report strings.Builder
	fmt.Fprintf(&report, "%d watchers (SSE, one connection each, in the test process) and a probe (its own process) of a %d-document view; one projector process (production build), 4 partitions; NATS and the MongoDB test backend in a process of their own\n",
		clients, watchKeys)
	fmt.Fprintf(&report, "connected in waves of %d, each waiting for its snapshots: %v\n", wave, connects)
	var with, without []*watchPhase
	for _, ph := range phases {
		fmt.Fprintf(&report, "%s\n", ph)
		switch {
		case ph.steady > 0:
		case ph.watchers > 0:
			with = append(with, ph)
		default:
			without = append(without, ph)
		}
	}
	var ratios []string
	for i := range min(len(with), len(without)) {
		ratios = append(ratios, fmt.Sprintf("%.2f", with[i].rate()/without[i].rate()))
	}
	meanRate := func(phs []*watchPhase) float64 {
		var r []float64
		for _, ph := range phs {
			r = append(r, ph.rate())
		}
		return mean(r)
	}
	fmt.Fprintf(&report, "throughput with/without watchers, per pair: %s; mean %.0f / %.0f events/s = %.2f\n",
		strings.Join(ratios, ", "), meanRate(with), meanRate(without), meanRate(with)/meanRate(without))
	// The projector's CPU: what an event costs it without watchers, and what each message
	// to a watcher adds.
	var cpuWith, cpuWithout time.Duration
	var evWith, evWithout, msgs int64
	for _, ph := range with {
		cpuWith, evWith, msgs = cpuWith+ph.cpu, evWith+int64(ph.events), msgs+ph.messages()
	}
	for _, ph := range without {
		cpuWithout, evWithout = cpuWithout+ph.cpu, evWithout+int64(ph.events)
	}
	if evWith > 0 && evWithout > 0 && msgs > 0 {
		perEvent := cpuWithout / time.Duration(evWithout)
		perMsg := (cpuWith - perEvent*time.Duration(evWith)) / time.Duration(msgs)
		fmt.Fprintf(&report, "projector CPU: %.0f µs an event without watchers, %.0f µs with them; %.2f µs a message to a watcher (%d messages)\n",
			perEvent.Seconds()*1e6, (cpuWith/time.Duration(evWith)).Seconds()*1e6, perMsg.Seconds()*1e6, msgs)
	}
	t.Log("\n" + report.String())
	if out := os.Getenv("JETBUS_WATCH_LOAD_RESULTS"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report.String()), 0o644))
	}

	var refused, bad int64
	for _, c := range append(slices.Clone(lt.clients), lt.probe.c) {
		refused, bad = refused+c.refused.Load(), bad+c.bad.Load()
	}
	assert.Zero(t, refused, "no watch is refused but for a documented 503")
	assert.Zero(t, bad, "every client receives each key's versions in increasing order, and only committed ones")
	for _, ph := range phases {
		if ph.steady == 0 {
			assert.Greater(t, ph.rate(), 0.0)
		}
	}
}

func watchKey(i int) string { return fmt.Sprintf("o-%04d", i) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// raiseFileLimit raises the process's soft limit of open files to at least n (each watcher
// holds a connection), up to the hard limit.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("%d open files are needed; the hard limit is %d (ulimit -Hn)", n, lim.Max)
	}
	lim.Cur = n
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
}

// watchPhase is one phase of the run and what it measured.
type watchPhase struct {
	name     string
	index    int
	watchers int
	events   int
	steady   int // events a second, paced; 0: a burst
	writes   int64
	// took is the phase, from its first publish until every client had every key's latest
	// version; publish is how long publishing took; apply, from the first publish to the
	// commit of the last write (bursts).
	took, publish, apply time.Duration
	cpu, self, backends  time.Duration // of the projector, of the test process, of the backends process
	busy                 time.Duration // of the machine: every process's
	cores                float64
	streams              streamCounts // what the streams went through
	catchUps             [2]int64     // the server's catch-ups: resumed, behind
	rss                  int64
	hist, probe          *latHist
	perClient            []int64 // messages each client received
}

func (ph *watchPhase) rate() float64 { return float64(ph.events) / ph.apply.Seconds() }

func (ph *watchPhase) String() string {
	var b strings.Builder
	who := "no watchers"
	if ph.watchers > 0 {
		who = fmt.Sprintf("%d watchers", ph.watchers)
	}
	if ph.steady > 0 {
		fmt.Fprintf(&b, "%s, %s: %d events paced at %d/s (%.1f/s achieved), %d writes", ph.name, who, ph.events,
			ph.steady, float64(ph.events)/ph.publish.Seconds(), ph.writes)
	} else {
		fmt.Fprintf(&b, "%s, %s: %d events (%d writes) applied in %.2f s (published in %.2f s): %.0f events/s", ph.name, who,
			ph.events, ph.writes, ph.apply.Seconds(), ph.publish.Seconds(), ph.rate())
	}
	others := ph.busy - ph.cpu - ph.self - ph.backends
	fmt.Fprintf(&b, "\n    CPU over %.1f s: projector %.1f s (%.0f µs an event), load generator %.1f s, backends %.1f s, other processes %.1f s, of %.0f cores; projector RSS max %d MiB",
		ph.took.Seconds(), ph.cpu.Seconds(), ph.cpuPerEvent().Seconds()*1e6, ph.self.Seconds(), ph.backends.Seconds(),
		max(others, 0).Seconds(), ph.cores, ph.rss>>20)
	if ph.watchers > 0 {
		pc := slices.Clone(ph.perClient)
		slices.Sort(pc)
		fmt.Fprintf(&b, "\n    clients: %s; each received min %d, median %d, max %d changes (the median %.0f %% of the writes); %.0f messages/s",
			ph.hist, pc[0], pc[len(pc)/2], pc[len(pc)-1], 100*float64(pc[len(pc)/2])/float64(max(ph.writes, 1)),
			float64(ph.messages())/ph.took.Seconds())
		fmt.Fprintf(&b, "\n    probe: %s", ph.probe)
		fmt.Fprintf(&b, "\n    streams: %s; the server caught up %d resumed watches and %d whose drainer fell behind",
			ph.streams, ph.catchUps[0], ph.catchUps[1])
	}
	return b.String()
}

func (ph *watchPhase) cpuPerEvent() time.Duration { return ph.cpu / time.Duration(max(ph.events, 1)) }

// messages is how many changes the clients received in all.
func (ph *watchPhase) messages() int64 {
	var n int64
	for _, c := range ph.perClient {
		n += c
	}
	return n
}

// commitLog is every write to the view's collection the test's change stream read: per
// key, each version written and its wallTime.
type commitLog struct {
	keys  [watchKeys]keyCommits
	total atomic.Int64
}

type keyCommits struct {
	mu     sync.RWMutex
	wall   map[int64]int64 // version → wallTime, Unix ns
	latest int64
}

func newCommitLog() *commitLog {
	l := &commitLog{}
	for i := range l.keys {
		l.keys[i].wall = map[int64]int64{}
	}
	return l
}

// follow reads the change stream until ctx ends.
func (l *commitLog) follow(ctx context.Context, cs *mongo.ChangeStream) error {
	defer cs.Close(context.WithoutCancel(ctx))
	for cs.Next(ctx) {
		raw := cs.Current
		key, ok := raw.Lookup("documentKey", "_id").StringValueOK()
		if !ok {
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(key, "o-"))
		if err != nil || k < 0 || k >= watchKeys {
			continue
		}
		v, ok := raw.Lookup("updateDescription", "updatedFields", "_v").AsInt64OK()
		if !ok {
			if v, ok = raw.Lookup("fullDocument", "_v").AsInt64OK(); !ok {
				continue
			}
		}
		wall, ok := raw.Lookup("wallTime").DateTimeOK()
		if !ok {
			return fmt.Errorf("a change event without wallTime: %s", raw)
		}
		kc := &l.keys[k]
		kc.mu.Lock()
		kc.wall[v] = time.UnixMilli(wall).UnixNano()
		kc.latest = max(kc.latest, v)
		kc.mu.Unlock()
		l.total.Add(1)
	}
	return cs.Err()
}

// at returns the wallTime of the write of key k's version v.
func (l *commitLog) at(k int, v int64) (time.Time, bool) {
	kc := &l.keys[k]
	kc.mu.RLock()
	w, ok := kc.wall[v]
	kc.mu.RUnlock()
	return time.Unix(0, w), ok
}

func (l *commitLog) last(k int) int64 {
	kc := &l.keys[k]
	kc.mu.RLock()
	defer kc.mu.RUnlock()
	return kc.latest
}

func (l *commitLog) count() int64 { return l.total.Load() }

// latHist counts latencies in buckets at most 1/64 of their value wide.
type latHist struct {
	counts [64 * 36]int64
	n      int64
	max    time.Duration
}

func latBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < 128 {
		return int(us)
	}
	e := bits.Len64(us) - 7 // us>>e is in [64, 128)
	return min(64*e+int(us>>e), 64*36-1)
}

// latUpper is the greatest latency of bucket i.
func latUpper(i int) time.Duration {
	if i < 128 {
		return time.Duration(i+1)*time.Microsecond - 1
	}
	e := (i - 64) / 64
	m := uint64(i - 64*e)
	return time.Duration((m+1)<<e)*time.Microsecond - 1
}

func (h *latHist) add(d time.Duration) {
	h.counts[latBucket(d)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *latHist) merge(o *latHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the upper bound of the bucket of the q-quantile.
func (h *latHist) quantile(q float64) time.Duration {
	want := max(int64(q*float64(h.n)+0.999999), 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return min(latUpper(i), h.max)
		}
	}
	return h.max
}

func (h *latHist) String() string {
	if h == nil || h.n == 0 {
		return "no messages"
	}
	r := func(d time.Duration) time.Duration {
		if d >= 100*time.Millisecond {
			return d.Round(time.Millisecond)
		}
		return d.Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("commit→client p50 %s, p99 %s, p99.9 %s, max %s over %d messages", r(h.quantile(.5)), r(h.quantile(.99)),
		r(h.quantile(.999)), r(h.max), h.n)
}

// watchLoad runs the clients.
type watchLoad struct {
	t       *testing.T
	base    string
	token   string
	cl      *http.Client
	commits *commitLog
	clients []*watchClient
	probe   *watchProbe
	phase   atomic.Int32 // the phase a message received now belongs to

	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// get GETs path with the test's token.
func (lt *watchLoad) get(path string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, lt.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+lt.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// catchUps reads the projector's count of watches that read a change stream of their
// own (snapshotapi_watch_catchups_total): resumed, behind.
func (lt *watchLoad) catchUps() [2]int64 {
	var n [2]int64
	_, metrics := lt.get("/metrics")
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, "snapshotapi_watch_catchups_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(labels, `reason="resumed"`):
			n[0] += int64(v)
		case strings.Contains(labels, `reason="behind"`):
			n[1] += int64(v)
		}
	}
	return n
}

// begin starts a set of streams, which stop ends.
func (lt *watchLoad) begin(ctx context.Context) {
	lt.ctx, lt.cancel = context.WithCancel(ctx)
}

// start connects clients, each from a snapshot.
func (lt *watchLoad) start(cs []*watchClient) {
	for _, c := range cs {
		c.synced.Store(false)
		c.lastID = ""
		lt.running.Go(func() { c.run(lt.ctx, lt) })
	}
}

// stop disconnects every client, and stops the probe.
func (lt *watchLoad) stop() {
	if lt.cancel != nil {
		lt.cancel()
	}
	lt.running.Wait()
	if lt.probe != nil {
		lt.probe.stop()
	}
}

// streamCounts are streamStats read at one time.
type streamCounts struct{ unavailable, expired, overflows, disconnects, ended, resumed int64 }

func (a streamCounts) minus(b streamCounts) streamCounts {
	return streamCounts{a.unavailable - b.unavailable, a.expired - b.expired, a.overflows - b.overflows,
		a.disconnects - b.disconnects, a.ended - b.ended, a.resumed - b.resumed}
}

func (a streamCounts) String() string {
	return fmt.Sprintf("answered 503 %d times, 410 %d times; ended with overflow %d, disconnect %d, otherwise %d; resumed %d",
		a.unavailable, a.expired, a.overflows, a.disconnects, a.ended, a.resumed)
}

// streamTotals sums the clients' streamStats (the probe's too).
func (lt *watchLoad) streamTotals() streamCounts {
	var st streamCounts
	cs := lt.clients
	if lt.probe != nil {
		cs = append(slices.Clone(cs), lt.probe.c)
	}
	for _, c := range cs {
		st.unavailable += c.unavailable.Load()
		st.expired += c.expired.Load()
		st.overflows += c.overflows.Load()
		st.disconnects += c.disconnects.Load()
		st.ended += c.ended.Load()
		st.resumed += c.resumed.Load()
	}
	return st
}

// streamStats count how a client's streams went.
type streamStats struct {
	refused, unavailable, expired, overflows, disconnects, ended, resumed, bad atomic.Int64
}

// watchClient is one SSE client: it reads its stream as an EventSource does, resuming with
// Last-Event-ID when the stream ends.
type watchClient struct {
	id     int
	synced atomic.Bool
	lastID string
	lastV  [watchKeys]atomic.Int64 // the last version received of each key
	streamStats

	mu       sync.Mutex
	hists    map[int]*latHist
	received map[int]int64
	pending  []receipt // messages whose commit the test had not read yet
}

type receipt struct {
	key   int
	v     int64
	phase int
	at    time.Time
}

// hist is the client's histogram of phase ph; c.mu held.
func (c *watchClient) hist(ph int) *latHist {
	if c.hists == nil {
		c.hists, c.received = map[int]*latHist{}, map[int]int64{}
	}
	h := c.hists[ph]
	if h == nil {
		h = &latHist{}
		c.hists[ph] = h
	}
	return h
}

// has reports whether c received at least version want[k] of every key k.
func (c *watchClient) has(want map[int]int64) bool {
	for k, v := range want {
		if c.lastV[k].Load() < v {
			return false
		}
	}
	return true
}

func (c *watchClient) missing(want map[int]int64) string {
	var out []string
	for k, v := range want {
		if got := c.lastV[k].Load(); got < v {
			out = append(out, fmt.Sprintf("%s: %d < %d", watchKey(k), got, v))
		}
	}
	slices.Sort(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, ", ")
}

// collect returns the latencies of phase ph and the count of changes received, matching
// the messages that came before the test's change stream read their commit.
func (c *watchClient) collect(lt *watchLoad, ph int) (*latHist, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.pending {
		if w, ok := lt.commits.at(r.key, r.v); ok {
			c.hist(r.phase).add(r.at.Sub(w))
		} else {
			lt.t.Errorf("client %d received %s version %d, which no write committed", c.id, watchKey(r.key), r.v)
			c.bad.Add(1)
		}
	}
	c.pending = c.pending[:0]
	return c.hist(ph), c.received[ph]
}

// run streams until ctx ends, resuming after every end of the stream.
func (c *watchClient) run(ctx context.Context, lt *watchLoad) {
	for ctx.Err() == nil {
		err := c.stream(ctx, lt)
		if ctx.Err() != nil {
			return
		}
		var retry errRetry
		if errors.As(err, &retry) {
			t := time.NewTimer(time.Second) // Retry-After: 1
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		c.resumed.Add(1)
	}
}

type errRetry struct{ code int }

func (e errRetry) Error() string { return fmt.Sprintf("answered %d", e.code) }

// stream reads one stream to its end.
func (c *watchClient) stream(ctx context.Context, lt *watchLoad) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lt.base+"/v1/views/orders?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+lt.token)
	req.Header.Set("Accept", "text/event-stream")
	if c.lastID != "" {
		req.Header.Set("Last-Event-ID", c.lastID)
	}
	resp, err := lt.cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
			c.unavailable.Add(1) // a bound, or the setup's request timeout: try again
			return errRetry{resp.StatusCode}
		case resp.StatusCode == http.StatusGone:
			// The position is no longer resumable: start again from a snapshot, as
			// docs/views.md tells a client to.
			c.expired.Add(1)
			c.lastID = ""
			return errors.New("position expired")
		}
		c.refused.Add(1)
		lt.t.Errorf("client %d: watch answered %d: %s", c.id, resp.StatusCode, b)
		return errRetry{resp.StatusCode}
	}
	return readStream(resp.Body, c.lastID != "", func(ev sseMessage) error {
		if ev.end {
			if ctx.Err() == nil {
				c.ended.Add(1)
			}
			return nil
		}
		if ev.id != nil {
			c.lastID = string(ev.id)
		}
		switch ev.event {
		case "upsert", "delete":
			k, v, ok := parseKeyVersion(ev.data)
			if !ok {
				lt.t.Errorf("client %d: %s without key or version: %s", c.id, ev.event, ev.data)
				c.bad.Add(1)
				return nil
			}
			c.record(lt, k, v, time.Now(), ev.live)
		case "synced":
			c.synced.Store(true)
		case "overflow":
			c.overflows.Add(1)
			return errors.New("overflow")
		case "disconnect":
			c.disconnects.Add(1)
			return errors.New("disconnect")
		}
		return nil
	})
}

// sseMessage is a message of a stream (or a comment with an id): live once the snapshot is
// over (or from the start of a resumed stream); end when the stream ended.
type sseMessage struct {
	event string
	id    []byte // nil: none
	data  []byte
	live  bool
	end   bool
}

// readStream parses a text/event-stream (the fields jetbus sends) and calls f with each
// message, and with end set when it ends.
func readStream(body io.Reader, live bool, f func(sseMessage) error) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var (
		event, data, id []byte
		hasID           bool
	)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			_ = f(sseMessage{live: live, end: true})
			return err
		}
		line = line[:len(line)-1]
		switch {
		case len(line) == 0: // dispatch
			m := sseMessage{event: string(event), data: data, live: live}
			if hasID {
				m.id = id
			}
			if len(data) > 0 || hasID {
				if err := f(m); err != nil {
					return err
				}
			}
			if m.event == "synced" {
				live = true
			}
			event, data, hasID = event[:0], data[:0], false
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("id: ")):
			id, hasID = append(id[:0], line[4:]...), true
		case bytes.HasPrefix(line, []byte("event: ")):
			event = append(event[:0], line[7:]...)
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data[:0], line[6:]...)
		}
	}
}

// record handles an upsert or a delete of key k at version v received at: a change once
// live, a document of the snapshot before.
func (c *watchClient) record(lt *watchLoad, k int, v int64, at time.Time, live bool) {
	prev := c.lastV[k].Load()
	if v < prev || (live && v == prev) {
		lt.t.Errorf("client %d: %s version %d after %d", c.id, watchKey(k), v, prev)
		c.bad.Add(1)
	}
	c.lastV[k].Store(v)
	if !live {
		return
	}
	ph := int(lt.phase.Load())
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hist(ph)
	c.received[ph]++
	if w, ok := lt.commits.at(k, v); ok {
		h.add(at.Sub(w))
		return
	}
	c.pending = append(c.pending, receipt{key: k, v: v, phase: ph, at: at})
}

// parseKeyVersion reads the key and version of a message's data,
// {"key":"o-0042","v":1234,...}.
func parseKeyVersion(data []byte) (int, int64, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"key":"o-`))
	if !ok {
		return 0, 0, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return 0, 0, false
	}
	k, err := strconv.Atoi(string(rest[:i]))
	if err != nil || k < 0 || k >= watchKeys {
		return 0, 0, false
	}
	rest, ok = bytes.CutPrefix(rest[i:], []byte(`","v":`))
	if !ok {
		return 0, 0, false
	}
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return k, v, err == nil
}

// The backends: NATS (JetStream) and the MongoDB test backend, as the other tests of the
// package run them in their own process, here in a process of their own: the test binary
// run again (TestMain runs it when watchBackendsEnv names a directory for JetStream). In the
// test process, each request of the projector to them would wait for a thread behind the
// goroutines of the 2,000 clients (an execution trace of the projector showed its bulk
// writes waiting on the backend most of the time): the load generator would slow the
// backends, not the projector. It prints "nats <url>" and "mongo <uri>", and stops when its
// standard input closes.
const watchBackendsEnv = "JETBUS_WATCH_BACKENDS"

// startWatchBackends starts the backends process and returns its URLs and its pid; it
// stops when t ends.
func startWatchBackends(t *testing.T) (natsURL, mongoURI string, pid int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), watchBackendsEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(out)
	for (natsURL == "" || mongoURI == "") && sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "nats "); ok {
			natsURL = u
		}
		if u, ok := strings.CutPrefix(sc.Text(), "mongo "); ok {
			mongoURI = u
		}
	}
	require.NotEmpty(t, natsURL, "the backends process prints its NATS URL")
	require.NotEmpty(t, mongoURI, "the backends process prints its MongoDB URI")
	return natsURL, mongoURI, cmd.Process.Pid
}

// runWatchBackends is the backends process.
func runWatchBackends(dir string) int {
	ns, err := embeddedtest.StartServer(embeddedtest.ServerOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "backends:", err)
		return 1
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	// An oplog of a million changes (the test backend keeps 10,000 by default), as a real
	// deployment's holds hours of them: a watch resuming after a burst finds its position.
	ms, err := minimongo.Start(minimongo.Options{OplogSize: 1_000_000})
	if err != nil {
		fmt.Fprintln(os.Stderr, "backends:", err)
		return 1
	}
	defer ms.Close()
	fmt.Printf("nats %s\nmongo %s\n", ns.ClientURL(), ms.URI())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// The probe: the test binary run again as one SSE client in a process of its own, apart
// from the load generator's goroutines (TestMain runs it when watchProbeEnv is set). It
// prints "m <received, Unix ns> <key> <version> <live>" for every upsert and delete, "s" at
// synced, and "r <what>" when its stream ends or is refused (it resumes), until killed.
const (
	watchProbeEnv      = "JETBUS_WATCH_PROBE_URL"
	watchProbeTokenEnv = "JETBUS_WATCH_PROBE_TOKEN"
)

type watchProbe struct {
	c    *watchClient
	cmd  *exec.Cmd
	done chan struct{}
}

// startProbe starts the probe process.
func (lt *watchLoad) startProbe(t *testing.T) {
	t.Helper()
	if lt.probe == nil {
		lt.probe = &watchProbe{c: &watchClient{id: -1}}
	}
	pr := lt.probe
	pr.c.synced.Store(false)
	pr.cmd = exec.Command(os.Args[0])
	pr.cmd.Env = append(os.Environ(), watchProbeEnv+"="+lt.base+"/v1/views/orders?watch=true", watchProbeTokenEnv+"="+lt.token)
	pr.cmd.Stderr = os.Stderr
	out, err := pr.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, pr.cmd.Start())
	pr.done = make(chan struct{})
	go func() {
		defer close(pr.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "s":
				pr.c.synced.Store(true)
			case len(f) == 5 && f[0] == "m":
				at, _ := strconv.ParseInt(f[1], 10, 64)
				k, _ := strconv.Atoi(f[2])
				v, _ := strconv.ParseInt(f[3], 10, 64)
				pr.c.record(lt, k, v, time.Unix(0, at), f[4] == "1")
			case len(f) == 2 && f[0] == "r":
				if n := map[string]*atomic.Int64{"unavailable": &pr.c.unavailable, "expired": &pr.c.expired, "overflow": &pr.c.overflows,
					"disconnect": &pr.c.disconnects, "ended": &pr.c.ended, "resumed": &pr.c.resumed}[f[1]]; n != nil {
					n.Add(1)
				}
			}
		}
	}()
}

// stop ends the probe process.
func (pr *watchProbe) stop() {
	if pr.cmd == nil {
		return
	}
	_ = pr.cmd.Process.Kill()
	<-pr.done
	_ = pr.cmd.Wait()
	pr.cmd = nil
}

// runWatchProbe is the probe process: it streams, resuming as an EventSource does (and as
// the clients of the test process do), until it is killed.
func runWatchProbe(url, token string) int {
	out := bufio.NewWriter(os.Stdout)
	note := func(line string) { fmt.Fprintln(out, line); _ = out.Flush() }
	cl := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	lastID := ""
	for {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := cl.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			return 1
		}
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			resp.Body.Close()
			note("r unavailable")
			time.Sleep(time.Second) // Retry-After: 1
			continue
		case http.StatusGone:
			resp.Body.Close()
			note("r expired")
			lastID = ""
			continue
		default:
			fmt.Fprintln(os.Stderr, "probe: watch answered", resp.Status)
			return 1
		}
		err = readStream(resp.Body, lastID != "", func(m sseMessage) error {
			if m.end {
				note("r ended")
				return nil
			}
			if m.id != nil {
				lastID = string(m.id)
			}
			switch m.event {
			case "upsert", "delete":
				at := time.Now().UnixNano()
				k, v, ok := parseKeyVersion(m.data)
				if !ok {
					return fmt.Errorf("%s without key or version: %s", m.event, m.data)
				}
				live := 0
				if m.live {
					live = 1
				}
				fmt.Fprintf(out, "m %d %d %d %d\n", at, k, v, live)
			case "synced":
				fmt.Fprintln(out, "s")
			case "overflow", "disconnect":
				note("r " + m.event)
				return errors.New(m.event)
			}
			return out.Flush()
		})
		resp.Body.Close()
		note("r resumed")
	}
}

// processCPU is the CPU time pid used so far (user and system), from /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // clock ticks: USER_HZ is 100 on Linux
}

// machineBusy returns the CPU time every process of the machine used so far, and the time
// of every CPU (busy or idle), from /proc/stat.
func machineBusy() (busy, all time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var ticks [8]int64
	for i := range ticks {
		ticks[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	var sum int64
	for _, n := range ticks {
		sum += n
	}
	idle := ticks[3] + ticks[4]
	return time.Duration(sum-idle) * time.Second / 100, time.Duration(sum) * time.Second / 100
}

// selfCPU is the CPU time this process used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssSampler samples a process's resident memory.
type rssSampler struct {
	pid  int
	peak atomic.Int64
}

func (r *rssSampler) run() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := residentBytes(r.pid); rss > r.peak.Load() {
				r.peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (r *rssSampler) reset()     { r.peak.Store(residentBytes(r.pid)) }
func (r *rssSampler) max() int64 { return r.peak.Load() }
