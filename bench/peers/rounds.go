package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
)

// metric is one figure a scenario reports per side and round.
type metric struct {
	name string // e.g. "consume + ack, no-op handler"
	unit string // "msgs/s" or "µs"
	// higherIsBetter is true for throughput, false for latency.
	higherIsBetter bool
}

// side is one client measured in a scenario. run does one timed run and returns one value
// per metric of the scenario, in order.
type side struct {
	name string
	run  func(ctx context.Context, round int) ([]float64, error)
}

// result is a scenario's figures: values[side][metric][round]. The first side is the Bus.
type result struct {
	metrics []metric
	sides   []string
	values  [][][]float64
}

// runRounds runs every side once per round. The order rotates by one each round, so each
// side goes first in some round and follows a different side, and the garbage of one side is
// collected before the next starts. Progress goes to progress, one line per side and round.
func runRounds(ctx context.Context, cfg Config, scenario string, metrics []metric, sides []side, progress io.Writer) (*result, error) {
	res := &result{metrics: metrics, values: make([][][]float64, len(sides))}
	for i, s := range sides {
		res.sides = append(res.sides, s.name)
		res.values[i] = make([][]float64, len(metrics))
	}
	for r := range cfg.Rounds {
		for k := range sides {
			i := (r + k) % len(sides)
			runtime.GC()
			sctx, cancel := context.WithTimeout(ctx, cfg.SideTimeout)
			vals, err := sides[i].run(sctx, r)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s, round %d, %s: %w", scenario, r+1, sides[i].name, err)
			}
			if len(vals) != len(metrics) {
				return nil, fmt.Errorf("%s, %s: %d values for %d metrics", scenario, sides[i].name, len(vals), len(metrics))
			}
			parts := make([]string, len(vals))
			for m, v := range vals {
				res.values[i][m] = append(res.values[i][m], v)
				parts[m] = fmt.Sprintf("%s %s", format(v, metrics[m].unit), metrics[m].unit)
			}
			fmt.Fprintf(progress, "%s: round %d/%d %-40s %s\n", scenario, r+1, cfg.Rounds, sides[i].name, strings.Join(parts, ", "))
		}
	}
	return res, nil
}

// stats returns the minimum, median and maximum of xs (the mean of the middle two for an
// even count).
func stats(xs []float64) (lo, med, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0, 0, 0
	}
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted xs, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
