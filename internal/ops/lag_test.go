package ops_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/ops/opstest"
)

var lagLine = regexp.MustCompile(`(?m)^jetbus_group_lag_seconds\{group="billing",partition="(\d+)",topic="orders"\} (\S+)$`)

// scrapeLag reads jetbus_group_lag_seconds of group billing per partition from /metrics.
func scrapeLag(t *testing.T, url string) map[int]float64 {
	t.Helper()
	code, body := get(t, url+"/metrics")
	require.Equal(t, 200, code)
	out := map[int]float64{}
	for _, m := range lagLine.FindAllStringSubmatch(body, -1) {
		p, _ := strconv.Atoi(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		out[p] = v
	}
	return out
}

// TestGroupLagSecondsGrowsWithWallTime: a group whose partition stalls (its handler holds
// its deliveries) reports, per partition, how long its oldest unacknowledged event has been
// stored; the number grows with the clock (moved an hour on here), the partitions that are
// done stay at 0, and /v1/ops/status reports the same.
func TestGroupLagSecondsGrowsWithWallTime(t *testing.T) {
	s := embeddedtest.NATS(t)
	g := opstest.StartGroup(t, s.ClientURL())
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := ops.Source{JS: g.Bus.JetStream(), Bus: g.Bus, Now: now}
	srv := httptest.NewServer(ops.Endpoints{Gatherer: prometheus.NewRegistry(),
		Status: func(ctx context.Context) (*ops.Status, error) { return ops.Collect(ctx, src) }}.Handler())
	defer srv.Close()

	before := scrapeLag(t, srv.URL)
	require.Len(t, before, g.Partitions, "a series per partition")
	for p, v := range before {
		if p == g.Held {
			assert.Greater(t, v, 0.0, "the stalled partition lags")
			assert.Less(t, v, 120.0)
		} else {
			assert.Zero(t, v, "partition %d finished its events", p)
		}
	}

	offset.Store(int64(time.Hour))
	var after map[int]float64
	require.True(t, embeddedtest.Poll(10*time.Second, 50*time.Millisecond, func() bool {
		after = scrapeLag(t, srv.URL)
		return after[g.Held] >= 3600
	}), "the lag moves with the clock")
	assert.InDelta(t, before[g.Held]+3600, after[g.Held], 120, "it grew by the hour the clock moved")
	for p, v := range after {
		if p != g.Held {
			assert.Zero(t, v, "partition %d finished its events", p)
		}
	}

	_, body := get(t, srv.URL+"/v1/ops/status")
	var st ops.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Groups, 1)
	assert.GreaterOrEqual(t, st.Groups[0].LagSeconds, 3600.0)
	assert.Equal(t, st.Groups[0].LagSeconds, st.Groups[0].Partitions[g.Held].LagSeconds)
}
