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
//
// The 304 ratio is snapshotapi_conditional_requests_total{result="not_modified"} over the
// sum of that metric, or over snapshotapi_requests_total for the share of all requests.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	conditional *prometheus.CounterVec
	cache       *prometheus.CounterVec
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
	}
	// Several Servers in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.requests), promreg.Register(r, &m.duration),
		promreg.Register(r, &m.conditional), promreg.Register(r, &m.cache),
	); err != nil {
		return nil, err
	}
	m.reqSeries, m.durSeries, m.condSeries = map[requestSeries]prometheus.Counter{}, map[string]prometheus.Observer{}, map[[2]string]prometheus.Counter{}
	m.hit, m.miss, m.bypass = m.cache.WithLabelValues("hit"), m.cache.WithLabelValues("miss"), m.cache.WithLabelValues("bypass")
	return m, nil
}

var codeText = func() map[int]string {
	m := map[int]string{}
	for _, c := range []int{200, 304, 400, 401, 403, 404, 405, 412, 413, 422, 431, 500, 503} {
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
