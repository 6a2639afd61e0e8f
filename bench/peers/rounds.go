package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
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
// cpu[side][round] is the process's CPU time (user + system: the side's client and the
// server work it causes, set-up included) per event of the run, in µs.
type result struct {
	metrics []metric
	sides   []string
	values  [][][]float64
	cpu     [][]float64
	noCPU   bool // cpu is not attributable to one side
	// alt is the index of a second Bus side every side is compared with too (the unordered
	// subscription), or 0 when there is none.
	alt int
}

// altSuffix ends the name of a scenario's second Bus side (result.alt).
const altSuffix = ", Unordered)"

// filterSides keeps the sides cfg.Sides selects.
func filterSides(cfg Config, sides []side) []side {
	kept := sides[:0:0]
	for _, s := range sides {
		if cfg.keeps(s.name) {
			kept = append(kept, s)
		}
	}
	return kept
}

// runRounds runs every side once per round. The order rotates by one each round, so each
// side goes first in some round and follows a different side, and the garbage of one side is
// collected before the next starts. events is how many events one run of a side handles.
// Progress goes to progress, one line per side and round.
func runRounds(ctx context.Context, cfg Config, scenario string, events int, metrics []metric, sides []side, progress io.Writer) (*result, error) {
	sides = filterSides(cfg, sides)
	if len(sides) == 0 {
		return nil, fmt.Errorf("%s: -sides %q keeps no side", scenario, strings.Join(cfg.Sides, ","))
	}
	res := &result{metrics: metrics, values: make([][][]float64, len(sides)), cpu: make([][]float64, len(sides))}
	for i, s := range sides {
		res.sides = append(res.sides, s.name)
		res.values[i] = make([][]float64, len(metrics))
		if i > 0 && strings.HasSuffix(s.name, altSuffix) && res.alt == 0 {
			res.alt = i
		}
	}
	for r := range cfg.Rounds {
		for k := range sides {
			i := (r + k) % len(sides)
			runtime.GC()
			sctx, cancel := context.WithTimeout(ctx, cfg.SideTimeout)
			var err error
			var vals []float64
			cpu0 := cpuTime()
			// Labels let a CPU profile (-cpuprofile) be split by side: pprof -tagfocus
			// side=... (the client goroutines a side starts inherit them; the server's do not).
			pprof.Do(sctx, pprof.Labels("scenario", scenario, "side", sides[i].name), func(ctx context.Context) {
				vals, err = sides[i].run(ctx, r)
			})
			cpu := cpuTime() - cpu0
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s, round %d, %s: %w", scenario, r+1, sides[i].name, err)
			}
			if len(vals) != len(metrics) {
				return nil, fmt.Errorf("%s, %s: %d values for %d metrics", scenario, sides[i].name, len(vals), len(metrics))
			}
			parts := make([]string, len(vals), len(vals)+1)
			for m, v := range vals {
				res.values[i][m] = append(res.values[i][m], v)
				parts[m] = fmt.Sprintf("%s %s", format(v, metrics[m].unit), metrics[m].unit)
			}
			perEvent := float64(cpu.Nanoseconds()) / 1e3 / float64(events)
			res.cpu[i] = append(res.cpu[i], perEvent)
			parts = append(parts, fmt.Sprintf("CPU %.1f µs/event", perEvent))
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
