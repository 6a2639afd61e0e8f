package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// load is a scenario's traffic: the Node client through ingress at a steady rate (with some
// refused messages), the Go client directly, and the HTTP readers measuring publish to
// visible.
type load struct {
	s       *stack
	t       *testing.T
	l       *ledger
	ingress publishPlan
	bus     publishPlan
	begin   time.Time
	end     time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errs    chan error
	lat     func() []time.Duration
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// startLoad publishes seconds×rate events through ingress (and a third as many through the
// Bus) in the background.
func (s *stack) startLoad(t *testing.T, name string, seconds, rate int) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{s: s, t: t, l: newLedger(), cancel: cancel, errs: make(chan error, 2), begin: time.Now(),
		ingress: publishPlan{Prefix: name + "-in", Count: seconds * rate, Keys: 40, Rate: rate, Bad: 5},
		bus:     publishPlan{Prefix: name + "-go", Count: seconds * rate / 3, Keys: 10}}
	ld.lat = s.latencies(ctx, ld.l, 8)
	ld.wg.Add(2)
	go func() { defer ld.wg.Done(); ld.errs <- s.publishIngress(ctx, t, ld.l, ld.ingress) }()
	go func() { defer ld.wg.Done(); s.publishBus(ctx, t, ld.l, ld.bus); ld.errs <- nil }()
	t.Cleanup(cancel)
	return ld
}

// total is the number of events the clients will publish (not counting refused ones).
func (ld *load) total() int { return ld.ingress.Count + ld.bus.Count }

// waitProgress waits until the clients have an outcome for frac of their events.
func (ld *load) waitProgress(frac float64, within time.Duration) {
	ld.t.Helper()
	waitAcked(ld.t, ld.l, int(frac*float64(ld.total())), within)
}

// ackedSince counts acknowledgements; used to prove publishing went on during a fault.
func (ld *load) acked() int { a, _, _ := ld.l.counts(); return a }

// finish waits for the clients, lets the readers catch up, and returns the figures.
func (ld *load) finish(within time.Duration) figures {
	ld.t.Helper()
	done := make(chan struct{})
	go func() { ld.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		ld.t.Fatalf("the clients did not finish within %s", within)
	}
	ld.end = time.Now()
	for range 2 {
		require.NoError(ld.t, <-ld.errs)
	}
	a, f, _ := ld.l.counts()
	// The readers: every acknowledged event queued for them is read or the deadline passes.
	assert.Eventually(ld.t, func() bool { return ld.l.reading.Load() == 0 }, 60*time.Second, 50*time.Millisecond,
		"the HTTP readers see every acknowledged event")
	ld.cancel()
	lat := ld.lat()
	fig := figures{acked: a, failed: f, seconds: ld.end.Sub(ld.begin).Seconds(), seen: len(lat)}
	if len(lat) > 0 {
		slices.Sort(lat)
		fig.p50, fig.p99, fig.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	assert.Zero(ld.t, f, "events given up by their clients (retried for 2 minutes each)")
	return fig
}

// figures are a scenario's load results.
type figures struct {
	acked, failed, seen int
	seconds             float64
	p50, p99, max       time.Duration
}

func (f figures) String() string {
	return fmt.Sprintf("%d events acknowledged in %.1fs (%.0f/s); publish→visible over HTTP (%d read): p50 %s, p99 %s, max %s",
		f.acked, f.seconds, float64(f.acked)/f.seconds, f.seen, f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), f.max.Round(time.Millisecond))
}

// report logs the figures and appends them to $JETBUS_E2E_RESULTS (a Markdown table row)
// when set.
func report(t *testing.T, scenario string, f figures) {
	t.Helper()
	t.Logf("%s: %s", scenario, f)
	path := os.Getenv("JETBUS_E2E_RESULTS")
	if path == "" {
		return
	}
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer fh.Close()
	_, err = fmt.Fprintf(fh, "| %s | %d | %.1f | %.0f | %s | %s | %s |\n", scenario, f.acked, f.seconds, float64(f.acked)/f.seconds,
		f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), f.max.Round(time.Millisecond))
	require.NoError(t, err)
}
