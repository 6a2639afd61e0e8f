package cmdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
)

// ChromiumEnv names the environment variable that makes the browser tests required: with
// JETBUS_TEST_CHROMIUM=required (.ci/run sets it, after installing Debian's chromium) a
// missing Chromium fails them instead of skipping them.
const ChromiumEnv = "JETBUS_TEST_CHROMIUM"

// chromium returns the path of a Chromium to drive, or skips t (fails it when ChromiumEnv is
// "required") when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "no chromium on PATH: install it (Debian: apt-get install chromium) to run the browser tests"
	if os.Getenv(ChromiumEnv) == "required" {
		t.Fatalf("%s (%s=required)", msg, ChromiumEnv)
	}
	t.Skip(msg)
	return ""
}

// watchPage is the page the browser runs: it gets a ticket with its bearer token (POST
// /v1/tickets, cross-origin), opens an EventSource on the view with it, and records every
// event in window.received and what happened to the connection in window.trace, for the
// test to read.
var watchPage = template.Must(template.New("page").Parse(`<!doctype html>
<meta charset="utf-8">
<title>watch</title>
<script>
window.received = [];
window.trace = [];
const api = {{.API}}, token = {{.Token}}, view = {{.View}};
(async () => {
  try {
    const r = await fetch(api + "/v1/tickets", {method: "POST",
      headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      body: JSON.stringify({views: [view]})});
    const body = await r.json();
    if (r.status !== 201) {
      trace.push("ticket: " + r.status + " " + JSON.stringify(body));
      return;
    }
    const es = new EventSource(api + "/v1/views/" + encodeURIComponent(view) + "?watch=true&ticket=" + encodeURIComponent(body.ticket));
    window.es = es;
    for (const type of ["upsert", "delete", "synced", "disconnect", "overflow"]) {
      es.addEventListener(type, e => received.push({type: type, id: e.lastEventId, data: e.data}));
    }
    es.onopen = () => trace.push("open");
    es.onerror = () => trace.push("error, readyState " + es.readyState);
  } catch (e) {
    trace.push("failed: " + e);
  }
})();
</script>
`))

// sseEvent is an event the page received.
type sseEvent struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Data string `json:"data"`
}

// change is what an upsert or delete says: its key, version and (upserts) document.
type change struct {
	Type, Key string
	V         uint64
	Doc       map[string]any
}

func (e sseEvent) change(t *testing.T) change {
	t.Helper()
	c := change{Type: e.Type}
	var body struct {
		Key string         `json:"key"`
		V   uint64         `json:"v"`
		Doc map[string]any `json:"doc"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.Data), &body), "%s event: %s", e.Type, e.Data)
	c.Key, c.V, c.Doc = body.Key, body.V, body.Doc
	return c
}

func (c change) String() string { return fmt.Sprintf("%s %s@%d", c.Type, c.Key, c.V) }

// pageState is what the page recorded so far.
type pageState struct {
	Received   []sseEvent `json:"received"`
	Trace      []string   `json:"trace"`
	ReadyState int        `json:"readyState"`
}

// TestBrowserWatch: in headless Chromium (Debian's chromium, driven over the DevTools
// protocol with chromedp), a page served from another origin gets a ticket with a bearer
// token (POST /v1/tickets, CORS), opens an EventSource on a view of a real projector
// process with it, and receives the snapshot (upserts in key order, then synced) and the
// changes after it. The projector is stopped, with SIGTERM, then SIGKILL, then SIGKILL
// again, while events are published, and restarted on the same port, the last time slowly
// (it cannot reach NATS until the browser has reconnected to it): the browser's EventSource
// reconnects by itself with Last-Event-ID, and the page gets every change after the
// restart exactly once, with no second snapshot, each key's versions strictly increasing,
// and ends at the view's final state.
//
// Without chromium on PATH the test skips, saying how to install it (apt-get install
// chromium); JETBUS_TEST_CHROMIUM=required (set by .ci/run) makes that a failure.
func TestBrowserWatch(t *testing.T) {
	chrome := chromium(t)
	bin := binaries(t, "")
	s := embeddedtest.NATS(t)
	mongoURI := embeddedtest.MongoURI(t)
	db := embeddedtest.Mongo(t)
	ctx := context.Background()

	const token = "browser-test-token-0123456789"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = watchPage.Execute(w, map[string]string{"API": r.URL.Query().Get("api"), "Token": token, "View": "orders"})
	}))
	defer page.Close()
	port := freePort(t)
	api := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, writeFile(cfg, fmt.Sprintf(`
mongo: {database: %s}
http: {cors_origins: [%q], request_timeout: 30s}
topics: [{name: orders}]
projections: [{name: orders-view, topic: orders, collection: orders}]
views: [{name: orders, projection: orders-view}]
auth: {tokens: [{name: browser, token: %s, views: [orders, ops]}]}
`, db.Name(), page.URL, token)))
	// startProjector starts a projector on port, connecting to NATS at natsURL; runProjector
	// starts one on the NATS server and waits until it is ready.
	startProjector := func(natsURL string) *proc {
		t.Helper()
		return start(t, filepath.Join(bin, "projector"), "run", "--config", cfg, "--nats-url", natsURL,
			"--mongo-uri", mongoURI, "--http-addr", fmt.Sprintf("127.0.0.1:%d", port))
	}
	awaitReady := func(p *proc) {
		t.Helper()
		require.True(t, embeddedtest.Poll(30*time.Second, 20*time.Millisecond, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK }),
			"the projector is ready; stderr:\n%s", p.stderr)
	}
	runProjector := func() *proc {
		t.Helper()
		p := startProjector(s.ClientURL())
		awaitReady(p)
		return p
	}
	projector := runProjector()

	bus := embeddedtest.Bus(t, s.ClientURL())
	var published []change // every change, in the order published
	publish := func(key string, payload any) {
		t.Helper()
		ev, err := bus.Publish(ctx, "orders", payload, jetbus.WithKey(key))
		require.NoError(t, err)
		c := change{Type: "upsert", Key: key, V: ev.Seq}
		if ev.Tombstone() {
			c.Type = "delete"
		}
		published = append(published, c)
	}
	tombstone := json.RawMessage("null")
	for i, k := range []string{"o-3", "o-1", "o-2", "o-1"} {
		publish(k, map[string]any{"n": i})
	}
	client := &http.Client{Timeout: 30 * time.Second}
	// get reads path of the API with the bearer token.
	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, api+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
		return string(b)
	}
	// viewAt is the view's version of each key once it has applied the event at seq
	// (read-your-writes).
	viewAt := func(seq uint64) map[string]uint64 {
		t.Helper()
		b := get(fmt.Sprintf("/v1/views/orders?meta=1&limit=100&after=0:%d&wait=10s", seq))
		var list struct {
			Items []struct {
				ID string `json:"_id"`
				V  uint64 `json:"_v"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(b), &list), "%s", b)
		m := map[string]uint64{}
		for _, it := range list.Items {
			m[it.ID] = it.V
		}
		return m
	}
	// The snapshot holds them all.
	require.Equal(t, map[string]uint64{"o-1": 4, "o-2": 3, "o-3": 1}, viewAt(4))

	// The browser.
	var chromeOut embeddedtest.SyncBuffer
	bctx, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	actx, cancelAlloc := chromedp.NewExecAllocator(bctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(&chromeOut))...)
	defer cancelAlloc()
	tab, closeTab := chromedp.NewContext(actx)
	defer closeTab()
	// The watch requests the browser sent, and the headers of each as it went on the wire
	// (Network.requestWillBeSentExtraInfo: Chromium adds Last-Event-ID below the page, so
	// requestWillBeSent does not show it). Either event may come first.
	var (
		mu         sync.Mutex
		watchIDs   []network.RequestID
		preflights int
		sent       = map[network.RequestID]network.Headers{}
	)
	err := chromedp.Listen(tab, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			if strings.Contains(e.Request.URL, "watch=true") {
				switch e.Request.Method {
				case http.MethodGet:
					watchIDs = append(watchIDs, e.RequestID)
				case http.MethodOptions:
					preflights++
				}
			}
		case *network.EventRequestWillBeSentExtraInfo:
			sent[e.RequestID] = e.Headers
		}
	})
	require.NoError(t, err, "chromium starts; its output:\n%s", chromeOut.String())
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(page.URL+"/?api="+api)),
		"chromium runs; its output:\n%s", chromeOut.String())
	defer func() {
		if t.Failed() {
			t.Logf("chromium's output:\n%s", chromeOut.Tail(50))
		}
	}()
	state := func() pageState {
		t.Helper()
		st, err := chromedp.Run(tab, chromedp.Evaluate[pageState](`({received: window.received, trace: window.trace, readyState: window.es ? window.es.readyState : -1})`))
		require.NoError(t, err)
		return st
	}
	// awaitPage polls the page until cond holds of what it recorded.
	awaitPage := func(what string, cond func(pageState) bool) pageState {
		t.Helper()
		var st pageState
		ok := embeddedtest.Poll(20*time.Second, 20*time.Millisecond, func() bool {
			st = state()
			return cond(st)
		})
		require.True(t, ok, "the page: %s; it received:\n%s\ntrace: %q", what, dump(t, st.Received), st.Trace)
		return st
	}
	// changesAfterSynced are the upserts and deletes the page received after synced.
	changesAfterSynced := func(st pageState) []change {
		var out []change
		synced := false
		for _, e := range st.Received {
			switch {
			case e.Type == "synced":
				synced = true
			case synced && (e.Type == "upsert" || e.Type == "delete"):
				out = append(out, e.change(t))
			}
		}
		return out
	}
	// awaitChanges waits until the page received, after synced, as many changes as were
	// published after the snapshot's (which they are is checked at the end).
	liveFrom := 4 // published[liveFrom:] come after the snapshot
	awaitChanges := func(what string) {
		t.Helper()
		want := published[liveFrom:]
		awaitPage(what, func(st pageState) bool { return len(changesAfterSynced(st)) >= len(want) })
	}

	st := awaitPage("synced", func(st pageState) bool {
		for _, e := range st.Received {
			if e.Type == "synced" {
				return true
			}
		}
		return false
	})
	require.GreaterOrEqual(t, len(st.Received), 4, "%s", dump(t, st.Received))
	var snapshot []string
	for _, e := range st.Received[:3] {
		c := e.change(t)
		assert.NotEmpty(t, e.ID, "every upsert of the snapshot has an id")
		snapshot = append(snapshot, c.String())
	}
	assert.Equal(t, []string{"upsert o-1@4", "upsert o-2@3", "upsert o-3@1"}, snapshot, "the snapshot, in key order")
	assert.Equal(t, "synced", st.Received[3].Type)
	assert.NotEmpty(t, st.Received[3].ID, "synced has the snapshot's position")

	// Live changes.
	publish("o-2", map[string]any{"n": 4})
	publish("o-4", map[string]any{"n": 5})
	publish("o-3", tombstone)
	awaitChanges("live changes after synced")

	// SIGTERM: the watch is told (event: disconnect); events published while the projector
	// is down and after its restart reach the page through the EventSource's own reconnect.
	code, _ := projector.Stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, code, "stderr:\n%s", projector.stderr)
	awaitPage("told of the shutdown", func(st pageState) bool {
		return len(st.Received) > 0 && st.Received[len(st.Received)-1].Type == "disconnect"
	})
	publish("o-1", map[string]any{"n": 6})
	publish("o-5", map[string]any{"n": 7})
	projector = runProjector()
	awaitChanges("the changes made while the projector was down (SIGTERM)")
	publish("o-4", map[string]any{"n": 8})
	publish("o-6", map[string]any{"n": 9})
	awaitChanges("the changes after its restart")

	// SIGKILL: the connection breaks without a word.
	code, _ = projector.Stop(syscall.SIGKILL, 30*time.Second)
	require.Equal(t, -1, code, "killed")
	publish("o-2", map[string]any{"n": 10})
	publish("o-6", tombstone)
	projector = runProjector()
	awaitChanges("the changes made while the projector was down (SIGKILL)")
	publish("o-7", map[string]any{"n": 11})
	publish("o-1", map[string]any{"n": 12})
	awaitChanges("the changes after its second restart")

	// A slow restart: the projector listens, but cannot reach NATS for a while, so its API
	// is not mounted yet when the browser reconnects. The reconnect waits for it (at most
	// http.request_timeout) rather than being answered 404, on which an EventSource gives up
	// for good.
	code, _ = projector.Stop(syscall.SIGKILL, 30*time.Second)
	require.Equal(t, -1, code, "killed")
	publish("o-3", map[string]any{"n": 13})
	mu.Lock()
	reconnects := len(watchIDs)
	mu.Unlock()
	gate := newGate(t, s.ClientURL())
	projector = startProjector(gate.url) // listening: start waits for its address
	require.True(t, embeddedtest.Poll(20*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range watchIDs[reconnects:] {
			if _, ok := sent[id]; ok {
				return true
			}
		}
		return false
	}), "the browser reconnects to the projector while it sets up")
	readyz, _ := projector.get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, readyz, "the projector has not reached NATS")
	assert.NotEqual(t, 2, state().ReadyState, "the EventSource is not closed")
	gate.open()
	awaitReady(projector)
	awaitChanges("the change made while the projector was down (slow restart)")
	publish("o-2", tombstone)
	awaitChanges("the changes after its third restart")

	st = state()
	got := changesAfterSynced(st)
	var gotS, wantS []string
	for _, c := range got {
		gotS = append(gotS, c.String())
	}
	for _, c := range published[liveFrom:] {
		wantS = append(wantS, c.String())
	}
	assert.Equal(t, wantS, gotS, "every change after the snapshot exactly once, in order")

	synced, versions := 0, map[string]uint64{}
	final := map[string]uint64{}
	for _, e := range st.Received {
		switch e.Type {
		case "synced":
			synced++
			continue
		case "upsert", "delete":
		default:
			continue
		}
		c := e.change(t)
		assert.Greater(t, c.V, versions[c.Key], "%s: each key's versions strictly increase", c)
		versions[c.Key] = c.V
		if c.Type == "delete" {
			delete(final, c.Key)
		} else {
			final[c.Key] = c.V
			assert.Equal(t, c.Key, c.Doc["_id"], "%s: the document", c)
		}
	}
	assert.Equal(t, 1, synced, "one snapshot: the reconnects resumed")
	assert.Equal(t, viewAt(published[len(published)-1].V), final, "the page ends at the view's state")
	assert.Equal(t, 1, st.ReadyState, "the EventSource is open; trace: %q", st.Trace)
	assert.Equal(t, 4, strings.Count(strings.Join(st.Trace, "\n"), "open"), "opened, then reopened after each restart: %q", st.Trace)

	// The browser sent Last-Event-ID on its reconnects, and the restarted server resumed
	// there: it sent no snapshot.
	mu.Lock()
	var reqs []network.Headers // the watch requests that reached the server, in order
	for _, id := range watchIDs {
		if h, ok := sent[id]; ok {
			reqs = append(reqs, h)
		}
	}
	t.Logf("watch requests: %d sent, %d reached the server, %d CORS preflights", len(watchIDs), len(reqs), preflights)
	mu.Unlock()
	require.GreaterOrEqual(t, len(reqs), 4, "the first watch request and a reconnect after each restart")
	assert.Nil(t, headerOf(reqs[0], "Last-Event-ID"), "the first request starts from a snapshot")
	for _, h := range reqs[1:] {
		assert.NotEmpty(t, headerOf(h, "Last-Event-ID"), "a reconnect names the last event: %v", h)
	}
	metrics := get("/metrics")
	assert.Contains(t, metrics, `snapshotapi_watch_events_total{event="synced",view="orders"} 0`, "the restarted projector sent no snapshot")
}

// gate is a loopback port for NATS clients that forwards to a NATS server once opened;
// until then nothing listens there, as when the server is not back yet.
type gate struct {
	t      *testing.T
	url    string
	addr   string
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newGate(t *testing.T, natsURL string) *gate {
	u, err := url.Parse(natsURL)
	require.NoError(t, err)
	g := &gate{t: t, target: u.Host, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	g.url = "nats://" + g.addr
	return g
}

// open listens on the gate's port and forwards each connection to the server, until the
// test ends.
func (g *gate) open() {
	ln, err := net.Listen("tcp", g.addr)
	require.NoError(g.t, err)
	var wg sync.WaitGroup
	g.t.Cleanup(func() {
		_ = ln.Close()
		g.mu.Lock()
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", g.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, c, d)
			g.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(d, c); _ = d.Close() })
			wg.Go(func() { _, _ = io.Copy(c, d); _ = c.Close() })
		}
	})
}

// headerOf returns the value of header name in h, case-insensitively (nil when absent).
func headerOf(h network.Headers, name string) any {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// dump lists events one a line, for failure messages.
func dump(t *testing.T, events []sseEvent) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %s id=%.16s… %s\n", e.Type, e.ID, e.Data)
	}
	return b.String()
}
