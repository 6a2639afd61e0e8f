package dlq

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/promreg"
)

type metrics struct {
	deadLetters *prometheus.CounterVec
	replayed    *prometheus.CounterVec
	discarded   *prometheus.CounterVec
	parkedKeys  prometheus.Gauge
	// advisories counts MAX_DELIVERIES advisories the server did not confirm (forged or
	// out of date): nothing was moved for them.
	advisories prometheus.Counter
	// mismatches counts deliveries that carry a recorded replay's ID but not its content.
	mismatches *prometheus.CounterVec
	// dropped counts letters the DLQ stream dropped at its limits (inferred, see
	// watchLimits).
	dropped *prometheus.CounterVec
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		return nil, nil
	}
	m := &metrics{
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dlq_dead_letters_total", Help: "Events moved to the DLQ."}, []string{"topic", "group", "reason"}),
		replayed:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dlq_replayed_total", Help: "Dead letters replayed to their topic."}, []string{"topic"}),
		discarded:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dlq_discarded_total", Help: "Dead letters discarded."}, []string{"topic"}),
		parkedKeys:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "dlq_parked_keys", Help: "Keys parked behind a dead letter, as this process sees them."}),
		advisories: prometheus.NewCounter(prometheus.CounterOpts{Name: "dlq_advisories_refused_total",
			Help: "MAX_DELIVERIES advisories the server did not confirm (forged, or out of date): nothing was moved."}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dlq_replay_mismatches_total",
			Help: "Events that carry a replayed event's ID but not the topic, key or body the replay published: delivered to every group as ordinary events."},
			[]string{"topic", "group"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dlq_dropped_by_limit_total",
			Help: "Dead letters a DLQ stream dropped at its limits: DLQ at dlq.max_bytes or dlq.max_age, DLQ_REJECTS at dlq.rejects.max_bytes or dlq.rejects.max_age (inferred by the sweeper); limit is max_bytes when the stream was at its byte limit, else max_age. Refusals aging out of DLQ_REJECTS (max_age) is normal."},
			[]string{"stream", "limit"}),
	}
	// Several DLQs in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.deadLetters), promreg.Register(r, &m.replayed),
		promreg.Register(r, &m.discarded), promreg.Register(r, &m.parkedKeys),
		promreg.Register(r, &m.advisories), promreg.Register(r, &m.dropped),
		promreg.Register(r, &m.mismatches),
	); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) deadLetter(topic, group, reason string) {
	if m != nil {
		m.deadLetters.WithLabelValues(topic, group, reason).Inc()
	}
}

func (m *metrics) replay(topic string) {
	if m != nil {
		m.replayed.WithLabelValues(topic).Inc()
	}
}

func (m *metrics) discard(topic string) {
	if m != nil {
		m.discarded.WithLabelValues(topic).Inc()
	}
}

func (m *metrics) parked(delta float64) {
	if m != nil {
		m.parkedKeys.Add(delta)
	}
}

func (m *metrics) advisoryRefused() {
	if m != nil {
		m.advisories.Inc()
	}
}

func (m *metrics) droppedByLimit(stream, limit string, n float64) {
	if m != nil {
		m.dropped.WithLabelValues(stream, limit).Add(n)
	}
}

func (m *metrics) replayMismatch(topic, group string) {
	if m != nil {
		m.mismatches.WithLabelValues(topic, group).Inc()
	}
}
