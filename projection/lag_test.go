package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/projection"
)

// maxGauge returns the largest value of the gauge family name in reg (-1: no series).
func maxGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	v := -1.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v = max(v, m.GetGauge().GetValue())
		}
	}
	return v
}

// TestLagSeconds: while MongoDB refuses the projection's writes, projection_lag_seconds grows
// with the time its oldest unwritten event has waited; once writes go through again and the
// view caught up, it is 0.
func TestLagSeconds(t *testing.T) {
	e := newEnv(t, "orders", 2)
	client := faultClient(t)
	for i := range 20 {
		e.publish(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	embeddedtest.InjectMongoFault(t, e.db.Client(), embeddedtest.MongoFault{Commands: []string{"update"}, Code: 91, AppName: faultApp})
	reg := prometheus.NewRegistry()
	c, err := projection.NewChangelog(e.bus, client, e.q, e.config("orders-view"),
		projection.WithLogger(embeddedtest.Logger(t)), projection.WithRegisterer(reg))
	require.NoError(t, err)
	r := start(t, c.Run)
	defer func() { require.NoError(t, r.stop()) }()

	require.True(t, embeddedtest.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		return maxGauge(t, reg, "projection_lag_seconds") >= 2
	}), "the lag in seconds grows while nothing can be written")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.db.Client().Database("admin").RunCommand(ctx,
		bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err())
	e.waitLag("orders-view", 30*time.Second)
	require.True(t, embeddedtest.Poll(10*time.Second, 50*time.Millisecond, func() bool {
		return maxGauge(t, reg, "projection_lag_seconds") == 0
	}), "0 once the view caught up")
}
