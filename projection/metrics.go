package projection

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/promreg"
)

// Event outcomes, the outcome label of projection_events_total.
const (
	outcomeWritten      = "written"       // part of a write that succeeded
	outcomeCoalesced    = "coalesced"     // superseded by a later event of its key in its batch
	outcomeStale        = "stale"         // not newer than an earlier event of its key in its batch
	outcomeSkipped      = "skipped"       // at or below the checkpoint, or settled by a middleware
	outcomeDeadLettered = "dead_lettered" // moved to the DLQ (reason projection)
)

type metrics struct {
	events     *prometheus.CounterVec   // projection, outcome
	writes     *prometheus.CounterVec   // projection, result: applied | stale
	batch      *prometheus.HistogramVec // projection
	bulk       *prometheus.HistogramVec // projection
	retries    *prometheus.CounterVec   // projection
	fenced     *prometheus.CounterVec   // projection
	outOfOrder *prometheus.CounterVec   // projection
	lag        *prometheus.GaugeVec     // projection, topic, partition
	lagSeconds *prometheus.GaugeVec     // projection, topic, partition
	generation *prometheus.GaugeVec     // projection
	rebuild    *prometheus.GaugeVec     // projection, what: done | total | rate | eta_seconds | generation
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		return nil, nil
	}
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "projection_events_total",
			Help: "Events a projection settled, by outcome: written, coalesced (superseded in its batch), stale (older than its batch's), skipped (at or below the checkpoint), dead_lettered."},
			[]string{"projection", "outcome"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "projection_writes_total",
			Help: "Document writes of changelog projections: applied (the document changed) or stale (the version guard skipped it)."},
			[]string{"projection", "result"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "projection_batch_size",
			Help:    "Events per written batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}, []string{"projection"}),
		bulk: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "projection_write_seconds",
			Help:    "Duration of one bulk write (changelog) or transaction commit (transactional), failures included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"projection"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "projection_retries_total",
			Help: "Batch writes that failed with a transient error and were retried (nothing acknowledged meanwhile)."},
			[]string{"projection"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "projection_fenced_total",
			Help: "Transactional commits refused because another owner moved the checkpoint first."},
			[]string{"projection"}),
		outOfOrder: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "projection_out_of_order_total",
			Help: "Deliveries dropped because the Bus handed a partition an event after a later one: the view misses them (it should stay 0; rebuild the view if not)."},
			[]string{"projection"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "projection_lag",
			Help: "Events of a partition the projection's live group has not written and acknowledged yet."},
			[]string{"projection", "topic", "partition"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "projection_lag_seconds",
			Help: "How far a projection's view is behind its topic in time: seconds since the oldest event of the partition not yet written and acknowledged was stored (0: none)."},
			[]string{"projection", "topic", "partition"}),
		generation: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "projection_generation",
			Help: "The live generation of a projection (0 until its first rebuild)."},
			[]string{"projection"}),
		rebuild: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "projection_rebuild",
			Help: "Progress of a projection's rebuild, as recorded in jetbus_projections: done and total events, rate (events/s), eta_seconds, and the generation being built (0: none)."},
			[]string{"projection", "what"}),
	}
	// Several projections in one process share the families.
	if err := errors.Join(
		promreg.Register(r, &m.events), promreg.Register(r, &m.writes), promreg.Register(r, &m.batch),
		promreg.Register(r, &m.bulk), promreg.Register(r, &m.retries), promreg.Register(r, &m.fenced), promreg.Register(r, &m.outOfOrder),
		promreg.Register(r, &m.lag), promreg.Register(r, &m.lagSeconds), promreg.Register(r, &m.generation), promreg.Register(r, &m.rebuild),
	); err != nil {
		return nil, err
	}
	return m, nil
}

// seed creates the series of a projection, so that they exist from the start.
func (m *metrics) seed(name string) {
	if m == nil {
		return
	}
	for _, o := range []string{outcomeWritten, outcomeCoalesced, outcomeStale, outcomeSkipped, outcomeDeadLettered} {
		m.events.WithLabelValues(name, o)
	}
	m.writes.WithLabelValues(name, "applied")
	m.writes.WithLabelValues(name, "stale")
	m.retries.WithLabelValues(name)
	m.outOfOrder.WithLabelValues(name)
	m.generation.WithLabelValues(name)
}

// seedFenced creates a transactional projection's projection_fenced_total series at 0.
func (m *metrics) seedFenced(name string) {
	if m != nil {
		m.fenced.WithLabelValues(name)
	}
}

func (m *metrics) event(name, outcome string, n int) {
	if m != nil && n > 0 {
		m.events.WithLabelValues(name, outcome).Add(float64(n))
	}
}

func (m *metrics) write(name string, applied, stale int64) {
	if m == nil {
		return
	}
	if applied > 0 {
		m.writes.WithLabelValues(name, "applied").Add(float64(applied))
	}
	if stale > 0 {
		m.writes.WithLabelValues(name, "stale").Add(float64(stale))
	}
}

func (m *metrics) batchSize(name string, n int) {
	if m != nil {
		m.batch.WithLabelValues(name).Observe(float64(n))
	}
}

func (m *metrics) writeSeconds(name string, s float64) {
	if m != nil {
		m.bulk.WithLabelValues(name).Observe(s)
	}
}

func (m *metrics) retry(name string) {
	if m != nil {
		m.retries.WithLabelValues(name).Inc()
	}
}

func (m *metrics) fence(name string) {
	if m != nil {
		m.fenced.WithLabelValues(name).Inc()
	}
}

func (m *metrics) outOfOrderDelivery(name string) {
	if m != nil {
		m.outOfOrder.WithLabelValues(name).Inc()
	}
}

func (m *metrics) setLag(name, topic string, p int, lag uint64, seconds float64) {
	if m != nil {
		m.lag.WithLabelValues(name, topic, strconv.Itoa(p)).Set(float64(lag))
		m.lagSeconds.WithLabelValues(name, topic, strconv.Itoa(p)).Set(seconds)
	}
}

func (m *metrics) setGeneration(name string, gen int) {
	if m != nil {
		m.generation.WithLabelValues(name).Set(float64(gen))
	}
}

func (m *metrics) setRebuild(name string, p *RebuildProgress) {
	if m == nil {
		return
	}
	if p == nil {
		p = &RebuildProgress{}
	}
	m.rebuild.WithLabelValues(name, "generation").Set(float64(p.Generation))
	m.rebuild.WithLabelValues(name, "done").Set(float64(p.Done))
	m.rebuild.WithLabelValues(name, "total").Set(float64(p.Total))
	m.rebuild.WithLabelValues(name, "rate").Set(p.Rate)
	m.rebuild.WithLabelValues(name, "eta_seconds").Set(p.ETA.Seconds())
}
