package ops

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a metrics registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Seed wraps r so that every metric vector registered through it with the labels {topic} or
// {topic, group} gets a zero series for each declared topic and group: dashboards and alerts
// see events_published_total{topic="orders"} 0 from the start instead of no series at all
// until the first event. Vectors with other labels are left alone.
func Seed(r prometheus.Registerer, topics []string, groups []GroupRef) prometheus.Registerer {
	return &seeder{Registerer: r, topics: topics, groups: groups}
}

type seeder struct {
	prometheus.Registerer
	topics []string
	groups []GroupRef
}

func (s *seeder) Register(c prometheus.Collector) error {
	err := s.Registerer.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		s.seed(c)
	case errors.As(err, &are):
		s.seed(are.ExistingCollector)
	}
	return err
}

func (s *seeder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

func (s *seeder) seed(c prometheus.Collector) {
	var with func(prometheus.Labels) error
	switch v := c.(type) {
	case *prometheus.CounterVec:
		with = func(l prometheus.Labels) error { _, err := v.GetMetricWith(l); return err }
	case *prometheus.GaugeVec:
		with = func(l prometheus.Labels) error { _, err := v.GetMetricWith(l); return err }
	case *prometheus.HistogramVec:
		with = func(l prometheus.Labels) error { _, err := v.GetMetricWith(l); return err }
	case *prometheus.SummaryVec:
		with = func(l prometheus.Labels) error { _, err := v.GetMetricWith(l); return err }
	default:
		return
	}
	// GetMetricWith fails, creating nothing, unless the labels are exactly the vector's.
	for _, t := range s.topics {
		if with(prometheus.Labels{"topic": t}) != nil {
			break
		}
	}
	for _, g := range s.groups {
		if with(prometheus.Labels{"topic": g.Topic, "group": g.Group}) != nil {
			break
		}
	}
}
