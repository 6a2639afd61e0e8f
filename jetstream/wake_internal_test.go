package jetstream

import (
	"testing"
	"time"
)

// A wake ends the waiting Next's context after each quiet interval of a spell, not while
// deliveries come; after the last interval it rests until rearmed by a delivery; nothing
// after stop. Ticks are driven by hand (the timer's intervals are an hour).
func TestPullWakeBacksOffThenRests(t *testing.T) {
	wakes := 0
	hour := []time.Duration{time.Hour, time.Hour, time.Hour}
	w, _ := startWake(hour, func() { wakes++ })
	defer w.stop()

	w.delivered.Add(3)
	w.check()
	if wakes != 0 || w.ctx.Err() != nil {
		t.Fatalf("woken while deliveries came (%d)", wakes)
	}
	for i := 1; i <= len(hour); i++ {
		ctx := w.ctx
		w.check()
		if wakes != i || ctx.Err() == nil {
			t.Fatalf("quiet interval %d: %d wakes, context ended: %v", i, wakes, ctx.Err() != nil)
		}
		w.renew() // what consume does when woken
		if w.resting.Load() != (i == len(hour)) {
			t.Fatalf("after %d wakes of %d: resting %v", i, len(hour), w.resting.Load())
		}
	}
	old := w.ctx
	w.renew()
	if old.Err() == nil {
		t.Fatal("renew left the previous context running")
	}

	w.delivered.Add(1)
	w.rearm() // consume: a delivery that finds the wake resting
	if w.resting.Load() || w.wakes != 0 {
		t.Fatalf("rearm left the wake resting (%v) or counting (%d)", w.resting.Load(), w.wakes)
	}
	w.check()
	if wakes != len(hour)+1 {
		t.Fatalf("the next quiet spell: %d wakes in all, want %d", wakes, len(hour)+1)
	}

	// All of a spell's wakes may come while a slow handler runs, none ending a Next: the
	// next delivery still finds the wake resting, and rearms it.
	for range len(hour) - 1 {
		w.check()
	}
	if !w.resting.Load() {
		t.Fatal("not resting after a spell's wakes")
	}
	w.delivered.Add(1)
	w.rearm()
	w.delivered.Add(1)
	w.check() // deliveries came since the rearm: no wake
	w.check() // quiet: woken
	if wakes != 2*len(hour)+1 {
		t.Fatalf("after a rearm without a renew: %d wakes in all, want %d", wakes, 2*len(hour)+1)
	}

	w.stop()
	w.check()
	if wakes != 2*len(hour)+1 {
		t.Fatalf("woken after stop (%d)", wakes)
	}
}
