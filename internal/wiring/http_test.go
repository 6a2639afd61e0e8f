package wiring_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/wiring"
)

const (
	viewToken = "view-token-0123456789"
	opsToken  = "ops-token-0123456789"
)

// projectorYAML is a projector with one view, tokens for it and for the operations
// endpoints, and the HTTP bounds given.
func projectorYAML(db, bounds string) string {
	return fmt.Sprintf(`
mongo: {database: %s}
http: {%s}
topics: [{name: orders, partitions: 2}]
projections: [{name: orders-view, topic: orders, collection: orders}]
views: [{name: orders, projection: orders-view}]
auth:
  tokens:
    - {name: app, token: %s, views: [orders]}
    - {name: prometheus, token: %s, views: [ops]}
`, db, bounds, viewToken, opsToken)
}

func get(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestOpsEndpointsNeedTheOpsScope: once auth is configured, /metrics and /v1/ops/status
// answer only a token with the ops scope; /healthz and /readyz stay open for probes; every
// response says nosniff.
func TestOpsEndpointsNeedTheOpsScope(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	p := start(t, wiring.Projector, t.TempDir(), projectorYAML("ops_scope", ""), "JETBUS_NATS_URLS="+s.ClientURL(), "JETBUS_MONGO_URI="+uri)
	for _, path := range []string{"/metrics", "/v1/ops/status"} {
		resp, body := get(t, p.base+path, "")
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s without a token: %s", path, body)
		assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
		resp, body = get(t, p.base+path, viewToken)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s with a view token: %s", path, body)
		assert.Contains(t, body, `"forbidden"`)
		resp, body = get(t, p.base+path, opsToken)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s with the ops token: %s", path, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, _ := get(t, p.base+path, "")
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s is open", path)
	}
	resp, _ := get(t, p.base+"/v1/views/orders/o-1", opsToken)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "the ops scope reads no view")
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/ops/status", "/v1/views/orders/o-1", "/v1/views/orders", "/nothing"} {
		for _, tok := range []string{"", viewToken, opsToken} {
			resp, _ := get(t, p.base+path, tok)
			assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%s (%d)", path, resp.StatusCode)
		}
	}
}

// TestConnectionAndRequestBounds: one connection more than http.max_connections is answered
// 503 with Retry-After at once; so is one request more than http.max_requests in flight,
// while probes still answer.
func TestConnectionAndRequestBounds(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	p := start(t, wiring.Projector, t.TempDir(), projectorYAML("bounds", "max_connections: 3, max_requests: 1"),
		"JETBUS_NATS_URLS="+s.ClientURL(), "JETBUS_MONGO_URI="+uri)
	addr := strings.TrimPrefix(p.base, "http://")

	// A request held in flight: read-your-writes waiting 1 s for a position never reached.
	// The probe and the held request race for the one place, so the held one is started
	// again until it holds the place while the probe asks.
	hold := func() <-chan int {
		held := make(chan int, 1)
		go func() {
			resp, _ := get(t, p.base+"/v1/views/orders/o-1?after=0:1000000&wait=1s", viewToken)
			held <- resp.StatusCode
		}()
		return held
	}
	var resp *http.Response
	var body string
	refused := false
	for try := 0; try < 20 && !refused; try++ {
		held := hold()
		resp, body = get(t, p.base+"/v1/views/orders/o-1", viewToken)
		refused = resp.StatusCode == http.StatusServiceUnavailable
		assert.Equal(t, http.StatusServiceUnavailable, <-held, "the held request ends not_applied, or lost the race")
	}
	require.True(t, refused, "a second request in flight is refused: %d %s", resp.StatusCode, body)
	assert.Contains(t, body, "too many requests in flight")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	r, _ := get(t, p.base+"/healthz", "")
	assert.Equal(t, http.StatusOK, r.StatusCode, "probes are not counted")

	// Three idle keep-alive connections take every place; the fourth is refused and closed.
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		r.Body.Close()
		conns = append(conns, c)
	}
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	r, err = http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "answered at once, not left hanging")
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
	b, _ := io.ReadAll(r.Body)
	assert.Contains(t, string(b), "too many connections")

	// A place freed is a place taken again.
	require.NoError(t, conns[0].Close())
	require.True(t, embeddedtest.Poll(5*time.Second, 10*time.Millisecond, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err == nil && r.StatusCode == http.StatusOK
	}))
}

// TestWatchesAreBoundedApart: watches (?watch=true) take no place among http.max_requests,
// which they would hold as long as their clients stay, and are bounded by
// http.max_watchers instead; when the projector stops, each watch is told and ends, so
// that the stop does not wait for them.
func TestWatchesAreBoundedApart(t *testing.T) {
	s := embeddedtest.NATS(t)
	uri := embeddedtest.MongoURI(t)
	p := start(t, wiring.Projector, t.TempDir(), projectorYAML("watches", "max_requests: 1, max_watchers: 2"),
		"JETBUS_NATS_URLS="+s.ClientURL(), "JETBUS_MONGO_URI="+uri)
	open := func() (*http.Response, *bufio.Reader) {
		req, err := http.NewRequest(http.MethodGet, p.base+"/v1/views/orders?watch=true", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+viewToken)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp, bufio.NewReader(resp.Body)
	}
	var streams []*bufio.Reader
	for range 2 {
		resp, br := open()
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for line, err := br.ReadString('\n'); line != "event: synced\n"; line, err = br.ReadString('\n') {
			require.NoError(t, err)
		}
		streams = append(streams, br)
	}
	r, body := get(t, p.base+"/v1/views/orders", viewToken)
	assert.Equal(t, http.StatusOK, r.StatusCode, "two watches hold no place among max_requests: 1: %s", body)
	third, _ := open()
	b, _ := io.ReadAll(third.Body)
	third.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, third.StatusCode)
	assert.Contains(t, string(b), "too many watches")

	start := time.Now()
	require.NoError(t, p.stop())
	assert.Less(t, time.Since(start), 10*time.Second, "the stop does not wait for the watches")
	for _, br := range streams {
		rest, _ := io.ReadAll(br)
		assert.Contains(t, string(rest), "event: disconnect")
		assert.Contains(t, string(rest), "shutting down")
	}
}
