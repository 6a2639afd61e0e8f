package ingress

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/promreg"
)

// otherTopic labels the refusals of subjects that are not an allowed topic, so that clients
// cannot create series at will.
const otherTopic = "_other"

var msBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// metrics are ingress's Prometheus metrics. Several ingresses in one process share them.
type metrics struct {
	accepted    *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	inflight    prometheus.Gauge
	stalled     prometheus.Gauge
	stalls      prometheus.Counter
	stalledSecs prometheus.Counter
	unavailable prometheus.Gauge
	dropped     prometheus.Counter
	abandoned   prometheus.Counter
	// verbsRefused counts discovery requests ($SRV.*) not answered: no inbox to answer on.
	verbsRefused prometheus.Counter
	// refusalsDropped counts refused fire-and-forget messages not dead-lettered (a flood).
	refusalsDropped prometheus.Counter
	// shed counts messages dropped unchecked because the subscription's buffer was filling.
	shed prometheus.Counter
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingress_accepted_total",
			Help: "Messages stored by ingress (duplicates included), by topic."}, []string{"topic"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingress_duplicates_total",
			Help: "Messages whose Nats-Msg-Id JetStream already held (answered duplicate: true), by topic."}, []string{"topic"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingress_rejected_total",
			Help: "Messages refused, by topic (_other for subjects that are not an allowed topic) and code."}, []string{"topic", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ingress_publish_duration_ms",
			Help: "From receipt to JetStream's acknowledgement, in milliseconds, by topic.", Buckets: msBuckets}, []string{"topic"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ingress_inflight",
			Help: "Messages held: awaiting JetStream's acknowledgement, a retry or a dead letter."}),
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ingress_backpressure",
			Help: "1 while ingress has stopped taking messages because max_in_flight are held."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_backpressure_total",
			Help: "Times ingress stopped taking messages because max_in_flight were held."}),
		stalledSecs: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_backpressure_seconds_total",
			Help: "Time ingress spent not taking messages because max_in_flight were held."}),
		unavailable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ingress_jetstream_unavailable",
			Help: "1 while JetStream does not store ingress's events: requests are answered unavailable, fire-and-forget messages wait."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_dropped_total",
			Help: "Messages NATS dropped before ingress took them: the subscription's pending buffer was full (slow consumer)."}),
		refusalsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_refusals_dropped_total",
			Help: "Refused fire-and-forget messages not dead-lettered: the refusals' own places were all taken (a flood); valid messages are not slowed."}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_shed_total",
			Help: "Messages dropped unchecked because the subscription's buffer was more than half full and they were larger than 1/32 of the room left in it (a flood of large messages)."}),
		verbsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_verbs_refused_total",
			Help: "Service discovery requests ($SRV.PING, INFO, STATS) not answered because their reply subject is not an inbox (reply_prefixes)."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingress_abandoned_total",
			Help: "Fire-and-forget messages neither stored nor dead-lettered when ingress stopped (JetStream or the DLQ unreachable until the drain deadline)."}),
	}
	if r == nil {
		return m, nil
	}
	// Several ingresses in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.accepted), promreg.Register(r, &m.duplicates),
		promreg.Register(r, &m.rejected), promreg.Register(r, &m.latency),
		promreg.Register(r, &m.inflight), promreg.Register(r, &m.stalled), promreg.Register(r, &m.stalls),
		promreg.Register(r, &m.stalledSecs), promreg.Register(r, &m.unavailable),
		promreg.Register(r, &m.dropped), promreg.Register(r, &m.abandoned),
		promreg.Register(r, &m.verbsRefused), promreg.Register(r, &m.refusalsDropped),
		promreg.Register(r, &m.shed),
	); err != nil {
		return nil, err
	}
	return m, nil
}

// topicMetrics are one allowed topic's series, resolved once.
type topicMetrics struct {
	accepted, duplicates prometheus.Counter
	latency              prometheus.Observer
	rejected             [7]prometheus.Counter // by Code.index
}

func (m *metrics) topic(t string) *topicMetrics {
	tm := &topicMetrics{
		accepted:   m.accepted.WithLabelValues(t),
		duplicates: m.duplicates.WithLabelValues(t),
		latency:    m.latency.WithLabelValues(t),
	}
	for i, c := range Codes {
		tm.rejected[i] = m.rejected.WithLabelValues(t, string(c))
	}
	return tm
}
