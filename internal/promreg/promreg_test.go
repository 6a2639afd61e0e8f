package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/internal/promreg"
)

func counterVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"topic"})
}

func TestRegisterReusesTheIdenticalCollector(t *testing.T) {
	r := prometheus.NewRegistry()
	first, second := counterVec(), counterVec()
	require.NoError(t, promreg.Register(r, &first))
	keep := second
	require.NoError(t, promreg.Register(r, &second))
	assert.Same(t, first, second, "the second caller shares the first one's family")
	assert.NotSame(t, keep, second)
	second.WithLabelValues("orders").Inc()
	assert.Equal(t, 1.0, testutil.ToFloat64(first.WithLabelValues("orders")))
}

func TestRegisterRefusesAConflictingCollector(t *testing.T) {
	r := prometheus.NewRegistry()
	c := counterVec()
	require.NoError(t, promreg.Register(r, &c))

	otherLabels := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"group"})
	assert.Error(t, promreg.Register(r, &otherLabels))

	otherHelp := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "Y."}, []string{"topic"})
	assert.Error(t, promreg.Register(r, &otherHelp))

	// Same descriptors, another type: not reusable as the caller's type.
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "G."})
	require.NoError(t, promreg.Register(r, &g))
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "G."}, nil)
	keep := gv
	err := promreg.Register(r, &gv)
	var are prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, err, &are)
	assert.Same(t, keep, gv, "*c is left alone on an error")
}

func TestRegisterWithoutRegisterer(t *testing.T) {
	c := counterVec()
	keep := c
	require.NoError(t, promreg.Register(nil, &c))
	assert.Same(t, keep, c)
	require.NoError(t, promreg.Replace(nil, c))
}

func TestReplaceTakesTheLatest(t *testing.T) {
	r := prometheus.NewRegistry()
	opts := prometheus.GaugeOpts{Name: "age", Help: "Age.", ConstLabels: prometheus.Labels{"feed": "f"}}
	require.NoError(t, promreg.Replace(r, prometheus.NewGaugeFunc(opts, func() float64 { return 1 })))
	require.NoError(t, promreg.Replace(r, prometheus.NewGaugeFunc(opts, func() float64 { return 2 })))
	n, err := testutil.GatherAndCount(r, "age")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	mfs, err := r.Gather()
	require.NoError(t, err)
	assert.Equal(t, 2.0, mfs[0].GetMetric()[0].GetGauge().GetValue())
}
