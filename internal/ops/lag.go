package ops

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// GroupLagSeconds is the metric of a group's lag in time, per topic, group and partition:
// seconds between now and the store time of the oldest event the group has not yet
// acknowledged (0 when it has finished every event). Read from the status at scrape time, so
// it is at most StatusTTL old and costs no more than the status does.
const GroupLagSeconds = "jetbus_group_lag_seconds"

// lagCollector exports GroupLagSeconds from the status cache.
type lagCollector struct {
	status *statusCache
	desc   *prometheus.Desc
}

func newLagCollector(status *statusCache) *lagCollector {
	return &lagCollector{status: status, desc: prometheus.NewDesc(GroupLagSeconds,
		"Seconds since the oldest event a consumer group has not acknowledged was stored (0: none).",
		[]string{"topic", "group", "partition"}, nil)}
}

// scrapeTimeout bounds the status a scrape computes.
const scrapeTimeout = 5 * time.Second

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	st, err := c.status.get(ctx)
	if err != nil || st == nil {
		return // the series are absent while the status cannot be read (absent() alerts on it)
	}
	for _, g := range st.Groups {
		for _, p := range g.Partitions {
			if !p.Consumer {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, p.LagSeconds, g.Topic, g.Group, strconv.Itoa(p.Partition))
		}
	}
}

// Ready is the metric of readiness, per check of /readyz: 1 when it passes, 0 when not.
// Computed at scrape time, as /readyz computes it.
const Ready = "jetbus_ready"

// readyCollector exports Ready by running the checks.
type readyCollector struct {
	checks func() []Check
	desc   *prometheus.Desc
}

func newReadyCollector(checks func() []Check) *readyCollector {
	return &readyCollector{checks: checks, desc: prometheus.NewDesc(Ready,
		"1 when the readiness check passes (as /readyz reports it), 0 when it fails.", []string{"check"}, nil)}
}

func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, chk := range c.checks() {
		ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
		v := 1.0
		if chk.Func(ctx) != nil {
			v = 0
		}
		cancel()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, chk.Name)
	}
}
