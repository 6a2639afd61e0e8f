package snapshotapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
	"github.com/jetbus/jetbus/internal/spans"
	"github.com/jetbus/jetbus/schema"
)

// Routes.
const (
	routeList    = "/v1/views/:view"
	routeKey     = "/v1/views/:view/:key"
	routeOpenAPI = "/openapi.json"
	// routeTopicKey is the state of a key of a keyed topic, from the stream.
	routeTopicKey = "/v1/topics/:topic/keys/:key"
)

// Patterns are the http.ServeMux patterns of the API's routes, for mounting its handler
// beside others.
var Patterns = []string{"/v1/views/", "/v1/topics/", "/v1/tickets", "/openapi.json"}

// Schemas is what the Server needs of a schema registry: the latest schema of a topic, for
// /openapi.json. *schema.Registry has it.
type Schemas interface {
	Latest(ctx context.Context, topic string) (*schema.Version, error)
}

var _ Schemas = (*schema.Registry)(nil)

// Deps are the Server's connections.
type Deps struct {
	// Mongo reads the views, their history, checkpoints and jetbus_projections. Required
	// when Config.Views is not empty.
	Mongo *mongo.Client
	// Schemas, when set, puts each view's topic schema in /openapi.json.
	Schemas Schemas
	// Keys reads the keys of Config.Topics from their streams (package jetstream's Bus).
	// Required when Config.Topics is not empty.
	Keys jetbus.KeyReader
}

// Option configures New; a nil Option is skipped.
type Option func(*settings) error

type settings struct {
	log *slog.Logger
	reg prometheus.Registerer
	tp  trace.TracerProvider // trace.go
}

// WithLogger logs faults of the server (never of requests) and the cache's stream (nil:
// discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *settings) error { o.log = l; return nil }
}

// WithRegisterer registers the API's metrics (see metrics.go's list) on r.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *settings) error { o.reg = r; return nil }
}

// Server is the snapshot API: an http.Handler. Run keeps its document cache live; without
// Run every read goes to MongoDB.
type Server struct {
	cfg     Config
	mongo   *mongo.Client
	schemas Schemas
	keys    jetbus.KeyReader
	topics  map[string]bool
	views   map[string]*view
	order   []*view
	auth    *authorizer
	cursors cursorCodec
	// positions seals the positions of views' changes (Jetbus-Position, watch ids).
	positions positionCodec
	// tickets seals the tickets of watches (POST /v1/tickets).
	tickets ticketCodec
	cache   *docCache
	known   checkpointKnown
	waiting atomic.Int64 // requests waiting for ?after=
	metrics *metrics
	log     *slog.Logger
	tracer  trace.Tracer // nil: the API does not trace (trace.go)
	echo    *echo.Echo
	now     func() time.Time
	openapi openAPICache
	bufs    sync.Pool

	// Watches: the hubs of watched collections, and the watchers streaming.
	hubsMu      sync.Mutex
	hubs        map[hubKey]*hub
	hubsStopped bool
	hubsRun     sync.WaitGroup // the hubs' goroutines (counted under hubsMu, before hubsStopped)
	hubsCtx     context.Context
	hubsCancel  context.CancelFunc
	hubRing     int
	ringWindow  time.Duration // what a hub's ring keeps: Config.WatchWindow, or hubWindow
	ringBytes   int64         // and Config.WatchWindowBytes
	catchups    *catchUps
	watchers    atomic.Int64
	// drainPause, set by a test (PauseDrainers), holds every drainer until it is closed;
	// switchPause (PauseSwitches) every switch before it moves a watch to the new generation,
	// switchesHeld counting them.
	drainPause, switchPause atomic.Pointer[chan struct{}]
	switchesHeld            atomic.Int32
}

// New returns the API over cfg's views. It does no I/O.
//
// Options: WithLogger, WithRegisterer, WithTracerProvider. Errors wrap ErrInvalidConfig (cfg, or Deps.Mongo
// missing) or come from registering metrics.
func New(deps Deps, cfg Config, opts ...Option) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps.Mongo == nil && len(cfg.Views) > 0 {
		return nil, fmt.Errorf("%w: Deps.Mongo is nil, and Views are served", ErrInvalidConfig)
	}
	if len(cfg.Topics) > 0 && deps.Keys == nil {
		return nil, fmt.Errorf("%w: Deps.Keys is nil, and Topics are served", ErrInvalidConfig)
	}
	var o settings
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mongo: deps.Mongo, schemas: deps.Schemas, keys: deps.Keys, topics: map[string]bool{}, views: map[string]*view{},
		auth: newAuthorizer(cfg), cursors: newCursorCodec(cfg.CursorKey), positions: newPositionCodec(cfg.CursorKey), tickets: newTicketCodec(cfg.CursorKey), cache: newDocCache(cfg.CacheBytes),
		metrics: m, log: o.log, tracer: spans.Tracer(o.tp, scope), now: time.Now}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.hubs = map[hubKey]*hub{}
	s.hubRing, s.ringWindow, s.ringBytes = hubRing, cfg.WatchWindow, cfg.WatchWindowBytes
	if hubWindow >= 0 {
		s.ringWindow = hubWindow
	}
	s.catchups = newCatchUps(cfg.MaxCatchUps)
	s.hubsCtx, s.hubsCancel = context.WithCancel(context.Background())
	if s.cache != nil {
		s.cache.onCheckpoint = func(db, id string) { s.known.wrote(db + "\x00" + id) }
		s.cache.onRestart = s.known.wroteAll
	}
	for _, v := range cfg.Views {
		vw := newView(v, deps.Mongo)
		s.views[v.Name] = vw
		s.order = append(s.order, vw)
	}
	for _, t := range cfg.Topics {
		s.topics[t] = true
	}
	s.echo = s.router()
	return s, nil
}

func (s *Server) router() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.traced, s.observe)
	if len(s.cfg.CORSOrigins) > 0 {
		e.Use(middleware.CORSWithConfig(middleware.CORSConfig{
			AllowOrigins:  s.cfg.CORSOrigins,
			AllowMethods:  []string{http.MethodGet, http.MethodHead, http.MethodPost},
			AllowHeaders:  []string{"Authorization", "If-None-Match", "If-Match", "If-Modified-Since", "If-Unmodified-Since", "Content-Type", "Last-Event-ID"},
			ExposeHeaders: []string{"ETag", "Last-Modified", "Link", "Retry-After", "WWW-Authenticate", PositionHeader, HeaderTraceResponse},
			MaxAge:        600,
		}))
	}
	e.Use(middleware.GzipWithConfig(middleware.GzipConfig{Skipper: func(c echo.Context) bool {
		r := c.Request()
		return !acceptsGzip(r) || watchQuery(r.URL.RawQuery)
	}}))
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		e.Add(m, routeList, s.getList)
		e.Add(m, routeKey, s.getKey)
		e.Add(m, routeOpenAPI, s.getOpenAPI)
		e.Add(m, routeTopicKey, s.getTopicKey)
	}
	e.Add(http.MethodPost, routeTickets, s.postTicket)
	return e
}

// ServeHTTP serves the API's routes. Every response says X-Content-Type-Options: nosniff (a JSON body is never sniffed as
// HTML by a browser).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.echo.ServeHTTP(w, r)
}

// Run keeps the document cache live with a change stream on each views' database, until ctx
// ends; then it ends the watches under way (each told with a disconnect event, so that an
// HTTP server's shutdown need not wait for them) and returns nil. A deployment without change streams leaves the cache off (it
// logs why) and Run waits for ctx.
func (s *Server) Run(ctx context.Context) error {
	// When Run ends the server stops: watches end (each client is told) so that the HTTP
	// server's shutdown does not wait for them.
	defer s.stopHubs()
	if s.cache == nil {
		<-ctx.Done()
		return nil
	}
	dbs := map[string]bool{}
	var wg sync.WaitGroup
	for _, v := range s.order {
		if dbs[v.Database] {
			continue
		}
		dbs[v.Database] = true
		wg.Go(func() {
			if err := s.cache.feed(ctx, s.mongo, v.Database, s.log); err != nil {
				s.log.Warn("document cache off: its change stream cannot run, so every read goes to MongoDB", "database", v.Database, "error", err)
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// Ready reports whether every view's sort fields lead an index of its live collection (the
// projection creates them at start), so that ordered lists do not scan.
func (s *Server) Ready(ctx context.Context) error {
	var errs []error
	for _, v := range s.order {
		if len(v.Sort) == 0 {
			continue
		}
		live, err := v.resolve(ctx, s.now)
		if err != nil {
			return retry.Opaque(err)
		}
		lead, err := leadingIndexFields(ctx, v.db.Collection(live.collection))
		if err != nil {
			return retry.Opaque(err)
		}
		for _, f := range v.Sort {
			if !lead[f] {
				errs = append(errs, fmt.Errorf("view %s: no index of %s.%s leads with %s", v.Name, v.Database, live.collection, f))
			}
		}
	}
	return errors.Join(errs...)
}

func leadingIndexFields(ctx context.Context, coll *mongo.Collection) (map[string]bool, error) {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return nil, err
	}
	lead := map[string]bool{}
	for _, sp := range specs {
		if el, err := sp.KeysDocument.IndexErr(0); err == nil {
			lead[el.Key()] = true
		}
	}
	return lead, nil
}

// observe bounds, times and counts every request, and writes its error.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		start := time.Now()
		r := c.Request()
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("snapshot API: panic", "panic", p, "path", r.URL.Path)
				err = newError(http.StatusInternalServerError, CodeInternal, "internal error")
			}
			if err != nil {
				c.Error(err)
				err = nil
			}
			route := c.Path()
			if route == "" {
				route = "none"
			}
			view := ""
			if _, ok := s.views[c.Param("view")]; ok {
				view = c.Param("view")
			}
			s.metrics.request(route, view, c.Response().Status, time.Since(start))
		}()
		if n := headerBytes(r); n > s.cfg.MaxHeaderBytes {
			return newError(http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge, "the request's header fields are %d bytes; at most %d", n, s.cfg.MaxHeaderBytes).
				with("max_bytes", s.cfg.MaxHeaderBytes)
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			return newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request body is %d bytes; at most %d (no route reads one)", r.ContentLength, s.cfg.MaxBodyBytes).
				with("max_bytes", s.cfg.MaxBodyBytes)
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(c.Response(), r.Body, s.cfg.MaxBodyBytes)
		}
		rc := &requestContext{Context: c, ctx: deadlineCtx{Context: r.Context(), deadline: start.Add(s.cfg.RequestTimeout)}}
		defer rc.ctx.stop()
		return next(rc)
	}
}

func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// handleError writes an error in the API's shape.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			ae = newError(he.Code, CodeNotFound, "no such route: the API serves /v1/views/{view}, /v1/views/{view}/{key}, /v1/topics/{topic}/keys/{key}, /v1/tickets and /openapi.json")
		case http.StatusMethodNotAllowed:
			if c.Path() == routeTickets {
				ae = newError(he.Code, CodeMethodNotAllowed, "POST /v1/tickets issues a ticket; nothing else is served there")
				break
			}
			ae = newError(he.Code, CodeMethodNotAllowed, "the API is read-only: GET and HEAD only")
		case http.StatusRequestEntityTooLarge:
			ae = newError(he.Code, CodeBodyTooLarge, "the request body is too large")
		default:
			ae = newError(he.Code, codeForStatus(he.Code), "%s", http.StatusText(he.Code))
		}
	default:
		s.log.Error("snapshot API: internal error", "error", err, "path", c.Request().URL.Path)
		ae = newError(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	s.writeError(c, ae)
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeBadQuery
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	}
	return CodeInternal
}

func (s *Server) writeError(c echo.Context, e *apiError) {
	h := c.Response().Header()
	h.Del("ETag")
	h.Del("Last-Modified")
	h.Del("Link")
	h.Del(PositionHeader)
	for k, vs := range e.header {
		h[k] = vs
	}
	if e.Status == http.StatusMethodNotAllowed {
		if c.Path() == routeTickets {
			h.Set("Allow", "POST")
		} else {
			h.Set("Allow", "GET, HEAD")
		}
	}
	h.Set("Cache-Control", "no-store")
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	_ = c.JSON(e.Status, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "details": details}})
}

// dbError turns a MongoDB failure into 503 (unavailable, timed out) or, for a command
// MongoDB refused, 500: a query this API built is wrong.
func (s *Server) dbError(ctx context.Context, err error) *apiError {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return newError(http.StatusServiceUnavailable, CodeTimeout, "the request ran out of time (%s)", s.cfg.RequestTimeout).withHeader("Retry-After", "1")
	case dbRefused(err):
		s.log.Error("snapshot API: MongoDB refused a query", "error", err)
		return newError(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	// The cause (hosts, topology) is logged, never sent: a client learns nothing of the backend.
	s.log.Warn("snapshot API: MongoDB unavailable", "error", err)
	return newError(http.StatusServiceUnavailable, CodeUnavailable, "the view store is unavailable").withHeader("Retry-After", "1")
}

// nodeStateCodes are MongoDB errors of a node that cannot serve now (stepping down, shutting
// down, unreachable, over its time limit): worth a retry.
var nodeStateCodes = []int{6, 7, 50, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}

func dbRefused(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) || retry.Transient(err) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return false
	}
	for _, c := range nodeStateCodes {
		if se.HasErrorCode(c) {
			return false
		}
	}
	return true
}

// viewOf returns the request's view, after authenticating and authorizing the request.
func (s *Server) viewOf(c echo.Context) (*view, *apiError) {
	p, e := s.auth.authenticate(c.Request())
	if e != nil {
		return nil, e
	}
	name, e := pathParam(c, "view")
	if e != nil {
		return nil, e
	}
	v := s.views[name]
	if v == nil {
		return nil, newError(http.StatusNotFound, CodeUnknownView, "no view %q", printable(name)).with("views", s.viewNames(p))
	}
	if e := s.auth.authorize(p, name); e != nil {
		return nil, e
	}
	return v, nil
}

// viewNames lists the views p may read (every view when the API is open): an error names
// only what the caller's scope may see.
func (s *Server) viewNames(p *principal) []string {
	out := []string{}
	for _, v := range s.order {
		if s.auth.open || p.may(v.Name) {
			out = append(out, v.Name)
		}
	}
	return out
}

// pathParam returns a path parameter, unescaped.
func pathParam(c echo.Context, name string) (string, *apiError) {
	v := c.Param(name)
	if c.Request().URL.RawPath != "" { // echo matched the escaped path: unescape the parameter
		u, err := url.PathUnescape(v)
		if err != nil {
			return "", newError(http.StatusBadRequest, CodeBadKey, "the %s in the path is not URL-encoded correctly", name)
		}
		v = u
	}
	return v, nil
}

func pathKey(c echo.Context) (string, *apiError) {
	k, e := pathParam(c, "key")
	if e != nil {
		return "", e
	}
	switch {
	case k == "":
		return "", newError(http.StatusBadRequest, CodeBadKey, "the key is empty")
	case !utf8.ValidString(k):
		return "", newError(http.StatusBadRequest, CodeBadKey, "the key is not UTF-8")
	}
	if err := jetbus.ValidateKey(k); err != nil {
		return "", newError(http.StatusBadRequest, CodeBadKey, "no event has this key: %s", strings.TrimPrefix(err.Error(), jetbus.ErrInvalidKey.Error()+": "))
	}
	return k, nil
}

// acceptsGzip reports whether the request accepts gzip (or x-gzip) with a non-zero q.
func acceptsGzip(r *http.Request) bool {
	ae := r.Header.Get("Accept-Encoding")
	if ae == "" || !strings.Contains(ae, "gzip") {
		return false
	}
	for _, part := range strings.Split(ae, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "x-gzip" {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					f = 0
				}
				q = f
			}
		}
		return q > 0
	}
	return false
}

// Field values shared by responses: each slice is full (len == cap), so that a later Add
// (CORS's Vary: Origin) copies it instead of writing into it.
var (
	noCache            = []string{DefaultCacheControl}[:1:1]
	varyAcceptEncoding = []string{"Accept-Encoding"}[:1:1]
)

// cacheHeaders sets Cache-Control and adds Accept-Encoding to Vary, without allocating for
// either on the hot path.
func cacheHeaders(h http.Header, cacheControl []string) {
	h["Cache-Control"] = cacheControl
	if len(h["Vary"]) == 0 {
		h["Vary"] = varyAcceptEncoding
		return
	}
	addVary(h, "Accept-Encoding")
}

// addVary adds field to Vary unless it is there.
func addVary(h http.Header, field string) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), field) {
				return
			}
		}
	}
	h.Add("Vary", field)
}
