package process

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetbus/jetbus/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what the HTTP clients of a process may hold: open connections, requests in
// flight, idle keep-alive connections. Beyond a bound a client gets 503 with Retry-After
// at once, never a hang. Zero fields take the defaults below.
type Limits struct {
	// MaxConnections bounds open connections; one more is answered 503 and closed.
	MaxConnections int
	// MaxRequests bounds requests being served at once (but /healthz and /readyz, which
	// orchestrators must always reach); one more is answered 503.
	MaxRequests int
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// RequestTimeout is the longest a request may take: the write deadline is a little
	// more, so a slow reader cannot hold a connection for ever.
	RequestTimeout time.Duration
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes int
	// Streams, if set, says which requests are long-lived streams bounded elsewhere (the
	// snapshot API's watches, by http.max_watchers): they take no place among MaxRequests,
	// which would otherwise be held for as long as each client stays.
	Streams func(*http.Request) bool
}

// Defaults of Limits.
const (
	DefaultMaxConnections    = 8192
	DefaultMaxRequests       = 1024
	DefaultIdleTimeout       = 60 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
)

func (l Limits) withDefaults() Limits {
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = DefaultMaxRequests
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = 10 * time.Second
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// httpMetrics counts what the limits refuse, for every listener of a process.
type httpMetrics struct {
	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

// newHTTPMetrics registers the HTTP metrics on reg (nil: nowhere).
func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "http_connections_open",
			Help: "HTTP connections open, on every listener of the process."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_refused_total",
			Help: "HTTP connections and requests refused with 503 by a bound (limit: connections or requests)."}, []string{"limit"}),
	}
	m.refused.WithLabelValues("connections")
	m.refused.WithLabelValues("requests")
	if err := errors.Join(promreg.Register(reg, &m.open), promreg.Register(reg, &m.refused)); err != nil {
		return nil, err
	}
	return m, nil
}

// NewServer returns an http.Server of h within the process's limits (http section): the
// idle, header and write timeouts, the header bound, the bound on requests in flight, and
// X-Content-Type-Options: nosniff on every response. Serve it on Env.Listen's listener,
// which bounds connections. Both count in http_connections_open and
// http_refused_total{limit}.
func (e *Env) NewServer(h http.Handler) *http.Server {
	return newServer(h, e.limits, e.http)
}

func newServer(h http.Handler, l Limits, m *httpMetrics) *http.Server {
	l = l.withDefaults()
	inFlight := make(chan struct{}, l.MaxRequests)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && (l.Streams == nil || !l.Streams(r)) {
			select {
			case inFlight <- struct{}{}:
				defer func() { <-inFlight }()
			default:
				m.refused.WithLabelValues("requests").Inc()
				writeOverloaded(w, "too many requests in flight")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	return &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		WriteTimeout:      l.RequestTimeout + 5*time.Second,
		IdleTimeout:       l.IdleTimeout,
	}
}

// overloaded is the body of a 503 from a bound, in the project's error shape.
func overloaded(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": "unavailable", "message": msg, "details": map[string]any{}}})
	return b
}

func writeOverloaded(w http.ResponseWriter, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Retry-After", "1")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(overloaded(msg))
}

// Listen listens on addr with the process's bound on open connections
// (http.max_connections, shared by all its listeners): one more is answered 503 with
// Retry-After and closed at once.
func (e *Env) Listen(addr string) (net.Listener, error) {
	return listen(addr, e.conns, e.http)
}

func listen(addr string, c *connCount, m *httpMetrics) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &limitListener{Listener: ln, c: c, m: m}, nil
}

// connCount is the open connections of a process, against their bound.
type connCount struct {
	max  int64
	open atomic.Int64
}

type limitListener struct {
	net.Listener
	c *connCount
	m *httpMetrics
}

// refusal is what a connection beyond the bound reads before it is closed.
var refusal = func() []byte {
	body := overloaded("too many connections")
	head := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
		"X-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: "
	return append(append([]byte(head), []byte(strconv.Itoa(len(body))+"\r\n\r\n")...), body...)
}()

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.c.open.Add(1) > l.c.max {
			l.c.open.Add(-1)
			l.m.refused.WithLabelValues("connections").Inc()
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(refusal)
			_ = c.Close()
			continue
		}
		l.m.open.Inc()
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its place back when closed, once.
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.c.open.Add(-1)
		c.l.m.open.Dec()
	})
	return c.Conn.Close()
}
