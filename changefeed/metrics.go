package changefeed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetbus/jetbus/internal/promreg"
)

// metrics are a feed's or drainer's Prometheus series; a nil *metrics records nothing.
// Families (label feed: the feed's or drainer's name; drainers' series start "outbox_"):
//
//	changefeed_changes_published_total      changes (and copied documents) published, acknowledged
//	changefeed_dead_letters_total           changes dead-lettered instead
//	changefeed_duplicates_total             changes published again that JetStream already had (after a restart)
//	changefeed_lag_seconds                  now minus the cluster time of the last change read
//	changefeed_position_age_seconds         now minus the cluster time of the saved position (0 on a standby)
//	changefeed_copy_documents_total         documents published by copies
//	changefeed_copy_progress_ratio          copied / estimated total of the running copy (1 when done)
//	changefeed_history_lost_total           times the saved position was gone from the oplog
//	changefeed_failed                       1 while the feed is failed (history lost with policy fail, a stream MongoDB refuses)
//	outbox_events_published_total           outbox documents published, acknowledged
//	outbox_dead_letters_total               outbox documents dead-lettered instead
//	outbox_duplicates_total                 outbox documents published again that JetStream already had
//	outbox_lag_seconds                      now minus the ts of the last outbox document published
type metrics struct {
	published, deadLetters, duplicates, copied, historyLost prometheus.Counter
	lag, posAge, copyProgress, failed                       prometheus.Gauge
}

type families struct {
	published, deadLetters, duplicates, copied, historyLost *prometheus.CounterVec
	lag, posAge, copyProgress, failed                       *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer, prefix, name string) (*metrics, error) {
	if r == nil {
		return nil, nil
	}
	l := []string{"feed"}
	counter := func(n, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + n, Help: help}, l)
	}
	gauge := func(n, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + n, Help: help}, l)
	}
	var f families
	if prefix == "outbox_" {
		f = families{
			published:   counter("events_published_total", "Outbox documents published and acknowledged."),
			deadLetters: counter("dead_letters_total", "Outbox documents dead-lettered instead of published."),
			duplicates:  counter("duplicates_total", "Outbox documents published again that JetStream already had (dropped)."),
			lag:         gauge("lag_seconds", "Now minus the ts of the last outbox document published."),
		}
	} else {
		f = families{
			published:    counter("changes_published_total", "Changes and copied documents published and acknowledged."),
			deadLetters:  counter("dead_letters_total", "Changes dead-lettered instead of published."),
			duplicates:   counter("duplicates_total", "Changes published again that JetStream already had (dropped): re-publishes after a restart."),
			copied:       counter("copy_documents_total", "Documents published by copies."),
			historyLost:  counter("history_lost_total", "Times the saved position was no longer in the oplog."),
			lag:          gauge("lag_seconds", "Now minus the cluster time of the last change read."),
			copyProgress: gauge("copy_progress_ratio", "Documents copied over the estimated total of the running copy (1 when none runs)."),
			failed:       gauge("failed", "1 while the feed is failed and publishes nothing."),
		}
	}
	var err error
	reg := func(c **prometheus.CounterVec) prometheus.Counter {
		if *c == nil || err != nil {
			return nil
		}
		if err = promreg.Register(r, c); err != nil {
			return nil
		}
		return (*c).WithLabelValues(name)
	}
	regG := func(g **prometheus.GaugeVec) prometheus.Gauge {
		if *g == nil || err != nil {
			return nil
		}
		if err = promreg.Register(r, g); err != nil {
			return nil
		}
		return (*g).WithLabelValues(name)
	}
	m := &metrics{
		published: reg(&f.published), deadLetters: reg(&f.deadLetters), duplicates: reg(&f.duplicates), copied: reg(&f.copied), historyLost: reg(&f.historyLost),
		lag: regG(&f.lag), copyProgress: regG(&f.copyProgress), failed: regG(&f.failed),
	}
	if err != nil {
		return nil, err
	}
	if m.copyProgress != nil {
		m.copyProgress.Set(1)
	}
	return m, nil
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

func set(g prometheus.Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

func (m *metrics) publish(rejected, dup bool) {
	if m == nil {
		return
	}
	switch {
	case rejected:
		inc(m.deadLetters)
	case dup:
		inc(m.duplicates)
	default:
		inc(m.published)
	}
}

func (m *metrics) lagged(at time.Time) {
	if m != nil && !at.IsZero() {
		set(m.lag, max(0, time.Since(at).Seconds()))
	}
}

// registerPositionAge registers changefeed_position_age_seconds{feed=name}, computed when
// scraped. A gauge of the same feed registered before (a setup retried in the same process)
// is replaced.
func registerPositionAge(r prometheus.Registerer, name string, age func() float64) error {
	if r == nil {
		return nil
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "changefeed_position_age_seconds",
		Help:        "Now minus the cluster time of the saved position (0 on a standby).",
		ConstLabels: prometheus.Labels{"feed": name},
	}, age)
	return promreg.Replace(r, g)
}
