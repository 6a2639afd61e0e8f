package main

import (
	"fmt"
	"io"
	"strconv"
)

// format renders a value of unit: rates in thousands ("104.5k"), latencies with one decimal.
func format(v float64, unit string) string {
	if unit == unitRate {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// Units of the metrics.
const (
	unitRate    = "msgs/s"
	unitLatency = "µs"
)

// writeTable writes one Markdown table of every result: per metric, one row per side with
// min, median and max over the rounds, the ratio of medians jetbus ÷ side, the same for the
// scenario's unordered Bus side when it has one (result.alt), and the median of the process
// CPU time per event.
func writeTable(w io.Writer, results []*result) {
	fmt.Fprintln(w, "| scenario | side | min | median | max | jetbus ÷ side (medians) | jetbus Unordered ÷ side (medians) | process CPU µs/event (median) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, res := range results {
		for m, mt := range res.metrics {
			_, busMed, _ := stats(res.values[0][m])
			_, altMed, _ := stats(res.values[res.alt][m])
			for i, name := range res.sides {
				lo, med, hi := stats(res.values[i][m])
				label := ""
				if i == 0 {
					label = fmt.Sprintf("%s (%s, %d rounds)", mt.name, mt.unit, len(res.values[i][m]))
				}
				ratio, altRatio := "—", "—"
				if i > 0 && med > 0 {
					ratio = strconv.FormatFloat(busMed/med, 'f', 2, 64)
				}
				if res.alt > 0 && i != res.alt && med > 0 {
					altRatio = strconv.FormatFloat(altMed/med, 'f', 2, 64)
				}
				cpu := "—" // not attributable to one side (the sync scenario interleaves them)
				if !res.noCPU {
					_, c, _ := stats(res.cpu[i])
					cpu = strconv.FormatFloat(c, 'f', 1, 64)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label, name,
					format(lo, mt.unit), format(med, mt.unit), format(hi, mt.unit), ratio, altRatio, cpu)
			}
		}
	}
}

// writePaired writes a second table: per metric and side, jetbus ÷ side computed within each
// round (the two runs of a round are minutes apart at most, so what drifts on a shared
// machine falls on both) and summarized as the median, minimum and maximum over the rounds,
// for the ordered Bus side and the unordered one (result.alt). The median of paired ratios
// moves less from run to run than the ratio of the medians of the first table.
func writePaired(w io.Writer, results []*result) {
	fmt.Fprintln(w, "| scenario | side | jetbus ÷ side, paired by round: median (min–max) | jetbus Unordered ÷ side, paired by round: median (min–max) |")
	fmt.Fprintln(w, "|---|---|---:|---:|")
	for _, res := range results {
		for m, mt := range res.metrics {
			for i, name := range res.sides {
				if i == 0 {
					continue
				}
				label := ""
				if i == 1 {
					label = fmt.Sprintf("%s (%d rounds)", mt.name, len(res.values[i][m]))
				}
				ordered, unordered := pairedRatio(res.values[0][m], res.values[i][m]), "—"
				if res.alt > 0 && i != res.alt {
					unordered = pairedRatio(res.values[res.alt][m], res.values[i][m])
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s |\n", label, name, ordered, unordered)
			}
		}
	}
}

// pairedRatio summarizes bus[r] ÷ side[r] over the rounds r.
func pairedRatio(bus, side []float64) string {
	var rs []float64
	for r := range min(len(bus), len(side)) {
		if side[r] > 0 {
			rs = append(rs, bus[r]/side[r])
		}
	}
	if len(rs) == 0 {
		return "—"
	}
	lo, med, hi := stats(rs)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", med, lo, hi)
}
