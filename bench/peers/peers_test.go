package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestSmoke runs every scenario once with small counts: every side runs, its events are
// stored and acknowledged at the server, and the table has a row for it.
func TestSmoke(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"-rounds=1", "-publish=300", "-sync=50", "-consume=500", "-partitioned=500", "-partitions=4", "-wm-publishers=4"}
	if code := run(t.Context(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, stderr.String())
	}
	for _, row := range []string{
		"| jetbus (PublishAsync) |", "| raw nats.go (PublishMsgAsync) |", "| watermill (Publish) |",
		"| watermill (Publish, 4 goroutines) |", "| jetbus (Publish) |", "| raw nats.go (PublishMsg) |",
		"| jetbus (Subscribe) |", "| jetbus (Subscribe, Unordered) |", "| watermill (AckAsync) |",
		"| watermill (default: AckSync) |", "| raw nats.go (pull, Messages) |",
		"| raw nats.go (pull, window 1000) |", "| raw nats.go (pull, pinned, window 1000) |",
		"| jetbus (partition.Subscribe, 1 member) |",
		"| raw nats.go (4 pull consumers) |",
	} {
		if !strings.Contains(stdout.String(), row) {
			t.Errorf("table has no row %q:\n%s", row, stdout.String())
		}
	}
	if !strings.Contains(stdout.String(), "| jetbus ÷ side, paired by round: median (min–max) |") {
		t.Errorf("no table of paired ratios:\n%s", stdout.String())
	}
}

// TestPairedRatio: each round's two figures are divided, then summarized.
func TestPairedRatio(t *testing.T) {
	if got, want := pairedRatio([]float64{100, 90, 120}, []float64{100, 100, 100}), "1.00 (0.90–1.20)"; got != want {
		t.Errorf("pairedRatio = %q, want %q", got, want)
	}
	if got := pairedRatio([]float64{1}, []float64{0}); got != "—" {
		t.Errorf("pairedRatio with no usable round = %q, want —", got)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"defaults", nil, true},
		{"some scenarios", []string{"-scenarios", "sync, decode"}, true},
		{"unknown scenario", []string{"-scenarios", "sync,fetch"}, false},
		{"no rounds", []string{"-rounds", "0"}, false},
		{"negative publishers", []string{"-wm-publishers", "-1"}, false},
		{"extra argument", []string{"now"}, false},
		{"some sides", []string{"-sides", "Unordered;AckAsync"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			if tt.ok && err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if !tt.ok && !errors.Is(err, errInvalidConfig) {
				t.Fatalf("parseFlags(%q) = %v, want errInvalidConfig", tt.args, err)
			}
		})
	}
}

// TestSides: -sides runs only the sides named, and the table compares them with the first
// kept and with the unordered Bus side.
func TestSides(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"-rounds=1", "-consume=300", "-scenarios=consume", "-sides=Unordered;AckAsync"}
	if code := run(t.Context(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, stderr.String())
	}
	table := stdout.String()
	for _, row := range []string{"| jetbus (Subscribe, Unordered) |", "| watermill (AckAsync) |"} {
		if !strings.Contains(table, row) {
			t.Errorf("table has no row %q:\n%s", row, table)
		}
	}
	for _, row := range []string{"| jetbus (Subscribe) |", "| watermill (default: AckSync) |", "| raw nats.go"} {
		if strings.Contains(table, row) {
			t.Errorf("table has a row %q that -sides left out:\n%s", row, table)
		}
	}
	if code := run(t.Context(), []string{"-rounds=1", "-consume=300", "-scenarios=consume", "-sides=nothing"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("-sides keeping no side: exit status %d, want 1", code)
	}
}

func TestStats(t *testing.T) {
	tests := []struct {
		name         string
		xs           []float64
		lo, med, max float64
	}{
		{"odd", []float64{5, 1, 3}, 1, 3, 5},
		{"even", []float64{4, 1, 3, 2}, 1, 2.5, 4},
		{"one", []float64{7}, 7, 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, med, hi := stats(tt.xs)
			if lo != tt.lo || med != tt.med || hi != tt.max {
				t.Fatalf("stats(%v) = %v, %v, %v; want %v, %v, %v", tt.xs, lo, med, hi, tt.lo, tt.med, tt.max)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	for p, want := range map[float64]float64{50: 50, 99: 99, 100: 100, 1: 1} {
		if got := percentile(xs, p); got != want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", p, got, want)
		}
	}
}
