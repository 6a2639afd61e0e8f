package cmdtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// maxLoadRSS bounds the projector's resident memory under the load run.
const maxLoadRSS = 768 << 20

// TestHTTPLoad runs loadClients concurrent keep-alive clients against one projector process
// for loadDuration, at loadRPS requests a second in all (JETBUS_LOAD_CLIENTS, JETBUS_LOAD_DURATION and
// JETBUS_LOAD_RPS override them), mixing conditional reads that end
// in 304, key reads, list pages and reads with ?after=&wait=. Nothing may fail with a 5xx
// other than the documented 503s of the bounds, every request is answered, and the
// process's memory stays under maxLoadRSS. The latencies are logged (BENCHMARKS.md keeps
// the full run's, with the command); they are measured, not asserted.
func TestHTTPLoad(t *testing.T) {
	loadClients, loadDuration, rps := loadClients, loadDuration, loadRPS
	if v, err := strconv.Atoi(os.Getenv("JETBUS_LOAD_CLIENTS")); err == nil && v > 0 {
		loadClients = v
	}
	if v, err := time.ParseDuration(os.Getenv("JETBUS_LOAD_DURATION")); err == nil && v > 0 {
		loadDuration = v
	}
	if v, err := strconv.Atoi(os.Getenv("JETBUS_LOAD_RPS")); err == nil && v > 0 {
		rps = v
	}
	bin := binaries(t, "")
	s := embeddedtest.NATS(t)
	db := embeddedtest.Mongo(t)
	ctx := context.Background()
	const keys = 1000
	var docs []any
	for i := range keys {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("o-%04d", i)}, {Key: "_v", Value: int64(1)},
			{Key: "_ts", Value: bson.NewDateTimeFromTime(time.Now())}, {Key: "status", Value: []string{"open", "paid", "shipped"}[i%3]},
			{Key: "total", Value: i}})
	}
	_, err := db.Collection("orders").InsertMany(ctx, docs)
	require.NoError(t, err)
	_, err = db.Collection(snapshotapi.CheckpointsCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: snapshotapi.CheckpointID("orders-view", "orders", 0)}, {Key: "seq", Value: int64(1)}})
	require.NoError(t, err)
	const token = "load-test-token-0123456789"
	cfg := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, writeFile(cfg, fmt.Sprintf(`
mongo: {database: %s}
http: {max_connections: %d}
topics: [{name: orders}]
projections: [{name: orders-view, topic: orders, collection: orders, indexes: [{fields: [status]}]}]
views: [{name: orders, projection: orders-view, filters: {status: string}, max_limit: 50}]
auth: {tokens: [{name: load, token: %s, views: [orders, ops]}]}
`, db.Name(), loadClients+100, token)))
	p := start(t, filepath.Join(bin, "projector"), "run", "--config", cfg, "--nats-url", s.ClientURL(),
		"--mongo-uri", embeddedtest.MongoURI(t), "--http-addr", "127.0.0.1:0")
	base := "http://" + p.addr
	require.Eventually(t, func() bool { code, _ := p.get("/readyz"); return code == 200 }, 60*time.Second, 20*time.Millisecond)
	t.Logf("projector at %s (pid %d)", base, p.Cmd.Process.Pid)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients, MaxConnsPerHost: loadClients,
		IdleConnTimeout: time.Minute, DisableCompression: true}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	etag := func(key string) string {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/views/orders/"+key, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.Header.Get("ETag")
	}
	etags := map[string]string{}
	for i := range 50 {
		k := fmt.Sprintf("o-%04d", i)
		etags[k] = etag(k)
	}

	type result struct {
		kind string
		code int
		took time.Duration
	}
	var (
		mu       sync.Mutex
		results  = map[string][]time.Duration{}
		codes    = map[string]map[int]int{}
		failures atomic.Int64
		rssMax   atomic.Int64
	)
	record := func(r result) {
		mu.Lock()
		defer mu.Unlock()
		results[r.kind] = append(results[r.kind], r.took)
		if codes[r.kind] == nil {
			codes[r.kind] = map[int]int{}
		}
		codes[r.kind][r.code]++
	}
	deadline := time.Now().Add(loadDuration)
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() { // the projector's resident memory, sampled
		defer close(rssDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := residentBytes(p.Cmd.Process.Pid); rss > rssMax.Load() {
				rssMax.Store(rss)
			}
			select {
			case <-stopRSS:
				return
			case <-tick.C:
			}
		}
	}()
	period := time.Duration(float64(time.Second) * float64(loadClients) / float64(rps))
	var wg sync.WaitGroup
	for c := range loadClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			// Spread the clients over one period: each starts its ticker at its own offset, so
			// that the rate is even (tickers started together would fire together, every
			// client at once, once a period).
			first := time.NewTimer(time.Duration(rng.Int64N(int64(period))))
			<-first.C
			tick := time.NewTicker(period)
			defer tick.Stop()
			for time.Now().Before(deadline) {
				k := fmt.Sprintf("o-%04d", rng.IntN(50))
				var kind, path string
				var hdr [2]string
				switch n := rng.IntN(10); {
				case n < 4:
					kind, path, hdr = "304", "/v1/views/orders/"+k, [2]string{"If-None-Match", etags[k]}
				case n < 7:
					kind, path = "key", "/v1/views/orders/"+k
				case n < 9:
					kind, path = "list", "/v1/views/orders?status=eq.paid&limit=20"
				default:
					kind, path = "after", "/v1/views/orders/"+k+"?after=0:1&wait=1s"
				}
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				if hdr[0] != "" {
					req.Header.Set(hdr[0], hdr[1])
				}
				begin := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failures.Add(1)
					t.Errorf("%s: %v", kind, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				record(result{kind, resp.StatusCode, time.Since(begin)})
				<-tick.C
			}
		})
	}
	wg.Wait()
	close(stopRSS)
	<-rssDone

	total := 0
	for kind, cs := range codes {
		for code, n := range cs {
			total += n
			switch {
			case code == http.StatusServiceUnavailable: // a documented bound
			case code >= 500:
				t.Errorf("%s: %d answers %d", kind, n, code)
			}
		}
	}
	assert.Zero(t, failures.Load(), "every request answered")
	assert.Equal(t, 0, codes["key"][http.StatusNotFound], "every key exists")
	assert.Greater(t, codes["304"][http.StatusNotModified], 0)
	assert.Less(t, rssMax.Load(), int64(maxLoadRSS), "the projector's memory stays bounded")
	var report strings.Builder
	fmt.Fprintf(&report, "%d clients, %s, target %d req/s: %d requests (%.0f/s), projector RSS max %d MiB\n",
		loadClients, loadDuration, rps, total, float64(total)/loadDuration.Seconds(), rssMax.Load()>>20)
	for _, kind := range []string{"304", "key", "list", "after"} {
		d := results[kind]
		slices.Sort(d)
		if len(d) == 0 {
			continue
		}
		q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))] }
		fmt.Fprintf(&report, "  %-5s n=%-7d p50 %-9s p99 %-9s max %-9s codes %v\n", kind, len(d), q(0.5).Round(10*time.Microsecond),
			q(0.99).Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond), codes[kind])
	}
	t.Log("\n" + report.String())

	if out := os.Getenv("JETBUS_LOAD_RESULTS"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report.String()), 0o644))
	}
}

// residentBytes reads a process's resident set size from /proc (0 where there is none).
func residentBytes(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
