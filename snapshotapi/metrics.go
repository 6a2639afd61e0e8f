package snapshotapi

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/promreg"
)

// metrics are the API's Prometheus metrics; a nil *metrics records nothing.
//
//	snapshotapi_requests_total{route,view,code}        requests answered, by route template and status
//	snapshotapi_request_duration_seconds{route}        latency
//	snapshotapi_conditional_requests_total{route,result}  requests with a validator: not_modified, modified or failed (412)
//	snapshotapi_cache_lookups_total{result}            document cache: hit, miss, bypass (after=, or the cache not live)
//	snapshotapi_watchers{view}                         watches streaming
//	snapshotapi_watch_streams                          MongoDB change streams open for watches: one per watched collection, and one per watch catching up
//	snapshotapi_watch_events_total{view,event}         events sent to watches: upsert, delete, synced
//	snapshotapi_watch_ends_total{view,reason}          watches the server ended: overflow, stalled (a write past its deadline), expired, unavailable, shutdown
//	snapshotapi_watch_catchups_total{view,reason}      watches that read a change stream of their own: resumed (from a position older than the changes kept), behind (their drainer, not their client, fell behind the changes kept), switched (following a rebuild's switch, from a time the new generation's changes kept no longer reach)
//	snapshotapi_watch_catchups_waiting                 watches waiting for a place among the catch-ups (Config.MaxCatchUps)
//
// The 304 ratio is snapshotapi_conditional_requests_total{result="not_modified"} over the
// sum of that metric, or over snapshotapi_requests_total for the share of all requests.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	conditional *prometheus.CounterVec
	cache       *prometheus.CounterVec
	watchers    *prometheus.GaugeVec
	streams     prometheus.Gauge
	watchEvents *prometheus.CounterVec
	watchEnds   *prometheus.CounterVec
	catchUps    *prometheus.CounterVec
	catchWait   prometheus.Gauge
	// The series already resolved, so that the hot paths skip the vectors' label hashing
	// (and boxing keys into interfaces).
	mu                sync.RWMutex
	reqSeries         map[requestSeries]prometheus.Counter
	durSeries         map[string]prometheus.Observer
	condSeries        map[[2]string]prometheus.Counter
	hit, miss, bypass prometheus.Counter
}

type requestSeries struct {
	route, view string
	code        int
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_requests_total",
			Help: "Snapshot API requests answered, by route template, view and status code."}, []string{"route", "view", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snapshotapi_request_duration_seconds",
			Help: "Snapshot API request latency.", Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"route"}),
		conditional: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_conditional_requests_total",
			Help: "Snapshot API requests carrying a validator, by result: not_modified (304), modified (200), failed (412)."}, []string{"route", "result"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_cache_lookups_total",
			Help: "Document cache lookups: hit, miss, bypass."}, []string{"result"}),
		watchers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "snapshotapi_watchers",
			Help: "Watches (?watch=true) streaming, by view."}, []string{"view"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapshotapi_watch_streams",
			Help: "MongoDB change streams open for watches: one per watched collection, and one per watch catching up."}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_watch_events_total",
			Help: "Events sent to watches, by view and event (upsert, delete, synced)."}, []string{"view", "event"}),
		watchEnds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_watch_ends_total",
			Help: "Watches the server ended, by view and reason: overflow, stalled, expired, unavailable, shutdown."}, []string{"view", "reason"}),
		catchUps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapshotapi_watch_catchups_total",
			Help: "Watches that read a change stream of their own, by view and reason: resumed (from a position older than the changes kept), behind (their drainer fell behind the changes kept, not their client)."}, []string{"view", "reason"}),
		catchWait: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapshotapi_watch_catchups_waiting",
			Help: "Watches waiting for a place among those reading a change stream of their own (http.max_catchups)."}),
	}
	// Several Servers in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.requests), promreg.Register(r, &m.duration),
		promreg.Register(r, &m.conditional), promreg.Register(r, &m.cache),
		promreg.Register(r, &m.watchers), promreg.Register(r, &m.streams),
		promreg.Register(r, &m.watchEvents), promreg.Register(r, &m.watchEnds),
		promreg.Register(r, &m.catchUps), promreg.Register(r, &m.catchWait),
	); err != nil {
		return nil, err
	}
	m.reqSeries, m.durSeries, m.condSeries = map[requestSeries]prometheus.Counter{}, map[string]prometheus.Observer{}, map[[2]string]prometheus.Counter{}
	m.hit, m.miss, m.bypass = m.cache.WithLabelValues("hit"), m.cache.WithLabelValues("miss"), m.cache.WithLabelValues("bypass")
	return m, nil
}

var codeText = func() map[int]string {
	m := map[int]string{}
	for _, c := range []int{200, 201, 304, 400, 401, 403, 404, 405, 406, 410, 412, 413, 415, 422, 431, 500, 503} {
		m[c] = strconv.Itoa(c)
	}
	return m
}()

func (m *metrics) request(route, view string, code int, d time.Duration) {
	if m == nil {
		return
	}
	k := requestSeries{route, view, code}
	m.mu.RLock()
	c, okC := m.reqSeries[k]
	o, okO := m.durSeries[route]
	m.mu.RUnlock()
	if !okC || !okO {
		text, known := codeText[code]
		if !known {
			text = strconv.Itoa(code)
		}
		c, o = m.requests.WithLabelValues(route, view, text), m.duration.WithLabelValues(route)
		m.mu.Lock()
		m.reqSeries[k], m.durSeries[route] = c, o
		m.mu.Unlock()
	}
	c.Inc()
	o.Observe(d.Seconds())
}

func (m *metrics) conditionalResult(route, result string) {
	if m == nil {
		return
	}
	k := [2]string{route, result}
	m.mu.RLock()
	c, ok := m.condSeries[k]
	m.mu.RUnlock()
	if !ok {
		c = m.conditional.WithLabelValues(route, result)
		m.mu.Lock()
		m.condSeries[k] = c
		m.mu.Unlock()
	}
	c.Inc()
}

func (m *metrics) cacheLookup(result string) {
	if m == nil {
		return
	}
	switch result {
	case "hit":
		m.hit.Inc()
	case "miss":
		m.miss.Inc()
	default:
		m.bypass.Inc()
	}
}

// watchSeries are one view's watch metrics, resolved once per watch.
type watchSeries struct {
	watchers                prometheus.Gauge
	upserts, deletes, synce prometheus.Counter
	m                       *metrics
	view                    string
}

func (m *metrics) watch(view string) *watchSeries {
	if m == nil {
		return nil
	}
	return &watchSeries{m: m, view: view, watchers: m.watchers.WithLabelValues(view),
		upserts: m.watchEvents.WithLabelValues(view, "upsert"), deletes: m.watchEvents.WithLabelValues(view, "delete"),
		synce: m.watchEvents.WithLabelValues(view, "synced")}
}

func (w *watchSeries) started() {
	if w != nil {
		w.watchers.Inc()
	}
}

func (w *watchSeries) stopped() {
	if w != nil {
		w.watchers.Dec()
	}
}

func (w *watchSeries) sent(upserts, deletes, synced int) {
	if w == nil {
		return
	}
	w.upserts.Add(float64(upserts))
	w.deletes.Add(float64(deletes))
	w.synce.Add(float64(synced))
}

func (w *watchSeries) ended(reason string) {
	if w != nil {
		w.m.watchEnds.WithLabelValues(w.view, reason).Inc()
	}
}

// caughtUp counts a watch that reads a change stream of its own, for reason.
func (w *watchSeries) caughtUp(reason string) {
	if w != nil {
		w.m.catchUps.WithLabelValues(w.view, reason).Inc()
	}
}

func (m *metrics) catchUpWaiting(n int) {
	if m != nil {
		m.catchWait.Add(float64(n))
	}
}

func (m *metrics) streamOpened(n int) {
	if m != nil {
		m.streams.Add(float64(n))
	}
}
