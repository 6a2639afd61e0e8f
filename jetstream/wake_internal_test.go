package jetstream

import (
	"testing"
	"time"
)

// A wake ends the waiting Next once per quiet spell: not while deliveries flow, not twice in
// one spell, and no more once stopped.
func TestPullWakeOncePerQuietSpell(t *testing.T) {
	wakes := 0
	w, _ := startWake(time.Hour, func() { wakes++ }) // ticks are driven by hand below
	defer w.stop()
	tick := func() { w.check(time.Hour) }

	w.delivered.Add(3)
	tick()
	if wakes != 0 {
		t.Fatalf("woken while deliveries flowed (%d)", wakes)
	}
	tick()
	if wakes != 1 {
		t.Fatalf("a tick without deliveries woke Next %d times, want 1", wakes)
	}
	next := w.renew() // what the consume loop does when woken
	tick()
	tick()
	if wakes != 1 {
		t.Fatalf("woken again in the same quiet spell (%d)", wakes)
	}
	w.delivered.Add(1)
	tick()
	tick()
	if wakes != 2 {
		t.Fatalf("the next quiet spell woke Next %d times, want 2 in all", wakes)
	}
	w.stop()
	tick()
	if wakes != 2 {
		t.Fatalf("woken after stop (%d)", wakes)
	}
	if len(next) != 1 {
		t.Fatalf("renew gave %d options, want the context's", len(next))
	}
}
