package jetstream

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/promreg"
)

// metrics are the Bus's Prometheus metrics; a nil *metrics records nothing.
type metrics struct {
	publishedTotal *prometheus.CounterVec
	deliveredTotal *prometheus.CounterVec
	ackedTotal     *prometheus.CounterVec
	nackedTotal    *prometheus.CounterVec
	inflight       *prometheus.GaugeVec
	handlerMs      *prometheus.HistogramVec
	pollMs         *prometheus.HistogramVec
	traceDropped   *prometheus.CounterVec
	resentTotal    *prometheus.CounterVec
}

var msBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		return nil, nil
	}
	tg := []string{"topic", "group"}
	m := &metrics{
		publishedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_published_total", Help: "Events stored by Publish, by topic."}, []string{"topic"}),
		deliveredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_delivered_total", Help: "Deliveries to handlers."}, tg),
		ackedTotal:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_acked_total", Help: "Deliveries acknowledged."}, tg),
		nackedTotal:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_nacked_total", Help: "Deliveries rejected (retried or terminated)."}, tg),
		inflight:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "events_inflight", Help: "Deliveries being handled or awaiting a manual ack."}, tg),
		handlerMs:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "delivery_handler_duration_ms", Help: "Handler run time in milliseconds.", Buckets: msBuckets}, tg),
		pollMs:         prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "subscribe_poll_duration_ms", Help: "Time waiting for the next delivery in milliseconds.", Buckets: msBuckets}, tg),
		traceDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_trace_headers_dropped_total",
			Help: "Malformed trace context headers dropped (traceparent with its tracestate, tracestate, baggage), by topic and header, at publish and at delivery."},
			[]string{"topic", "header"}),
		resentTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_publish_resent_total",
			Help: "Publishes sent again because their acknowledgement did not come within the resend interval (a stream leader change), by topic."}, []string{"topic"}),
	}
	// Several Buses in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.publishedTotal), promreg.Register(r, &m.deliveredTotal), promreg.Register(r, &m.ackedTotal),
		promreg.Register(r, &m.nackedTotal), promreg.Register(r, &m.inflight), promreg.Register(r, &m.handlerMs),
		promreg.Register(r, &m.pollMs), promreg.Register(r, &m.traceDropped), promreg.Register(r, &m.resentTotal),
	); err != nil {
		return nil, err
	}
	return m, nil
}

// groupMetrics are the metrics of one (topic, group), resolved once per consumer.
type groupMetrics struct {
	delivered, acked, nacked prometheus.Counter
	inflight                 prometheus.Gauge
	handlerMs, pollMs        prometheus.Observer
}

func (m *metrics) published(topic string) {
	if m != nil {
		m.publishedTotal.WithLabelValues(topic).Inc()
	}
}

// resent counts a publish of topic sent again (WithResendAfter).
func (m *metrics) resent(topic string) {
	if m != nil {
		m.resentTotal.WithLabelValues(topic).Inc()
	}
}

// dropped counts the trace context headers of drops dropped from an event of topic.
func (m *metrics) dropped(topic string, drops traceDrops) {
	if m == nil || drops == 0 {
		return
	}
	for _, h := range []struct {
		bit  traceDrops
		name string
	}{{dropTraceParent, jetbus.HeaderTraceParent}, {dropTraceState, jetbus.HeaderTraceState}, {dropBaggage, jetbus.HeaderBaggage}} {
		if drops&h.bit != 0 {
			m.traceDropped.WithLabelValues(topic, h.name).Inc()
		}
	}
}

func (m *metrics) group(topic, group string) *groupMetrics {
	if m == nil {
		return nil
	}
	return &groupMetrics{
		delivered: m.deliveredTotal.WithLabelValues(topic, group),
		acked:     m.ackedTotal.WithLabelValues(topic, group),
		nacked:    m.nackedTotal.WithLabelValues(topic, group),
		inflight:  m.inflight.WithLabelValues(topic, group),
		handlerMs: m.handlerMs.WithLabelValues(topic, group),
		pollMs:    m.pollMs.WithLabelValues(topic, group),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (g *groupMetrics) deliver() {
	if g != nil {
		g.delivered.Inc()
		g.inflight.Inc()
	}
}

func (g *groupMetrics) poll(d time.Duration) {
	if g != nil {
		g.pollMs.Observe(ms(d))
	}
}

func (g *groupMetrics) handled(d time.Duration) {
	if g != nil {
		g.handlerMs.Observe(ms(d))
	}
}

func (g *groupMetrics) settle(acked bool) {
	if g == nil {
		return
	}
	g.inflight.Dec()
	if acked {
		g.acked.Inc()
	} else {
		g.nacked.Inc()
	}
}
