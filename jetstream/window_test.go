package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWindowSizing(t *testing.T) {
	cases := []struct {
		name           string
		batch, max, kc int
		ackTimeout     time.Duration
		handler        time.Duration
		want           []int // sizes after each window's worth of events; 0: unchanged
	}{
		{"fast handler grows to MaxInFlight", 100, 1000, 0, 30 * time.Second, time.Microsecond, []int{1000, 0}},
		{"grows to a power of two below MaxInFlight", 100, 5000, 0, 2 * time.Second, 100 * time.Microsecond, []int{4096, 0}},
		{"a handler that keeps up with the batch keeps it", 100, 1000, 0, 30 * time.Second, 50 * time.Millisecond, []int{0, 0}},
		{"a slow handler shrinks the window below the batch", 100, 1000, 0, 30 * time.Second, time.Second, []int{4, 0}},
		{"a handler slower than a quarter of the ack timeout pulls one at a time", 100, 1000, 0, 30 * time.Second, 10 * time.Second, []int{1, 0}},
		{"key concurrency multiplies what the handlers keep up with", 10, 1000, 8, 30 * time.Second, 300 * time.Millisecond, []int{128, 0}},
		{"MaxInFlight bounds the first pull too", 500, 50, 0, 30 * time.Second, time.Microsecond, []int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(tc.batch, tc.max, tc.kc, tc.ackTimeout)
			now := time.Unix(0, 0)
			assert.Equal(t, min(tc.batch, tc.max), w.size, "first pull")
			for i, want := range tc.want {
				before := w.size
				resized := false
				for range before {
					w.observe(tc.handler)
					now = now.Add(tc.handler)
					if w.delivered(now) != 0 {
						resized = true
						break
					}
				}
				if want == 0 {
					assert.False(t, resized, "step %d: resized to %d", i, w.size)
					assert.Equal(t, before, w.size, "step %d", i)
				} else {
					assert.True(t, resized, "step %d", i)
					assert.Equal(t, want, w.size, "step %d", i)
				}
			}
		})
	}
}

func TestWindowFollowsTheHandler(t *testing.T) {
	w := newWindow(100, 1000, 0, 30*time.Second)
	now := time.Unix(0, 0)
	step := func(d time.Duration) int {
		for range w.size {
			w.observe(d)
			now = now.Add(d)
			if r := w.delivered(now); r != 0 {
				return r
			}
		}
		return 0
	}
	assert.Equal(t, 1, step(time.Microsecond))
	assert.Equal(t, 1000, w.size, "fast")
	// The handler slows down to 200ms an event: the window is checked once its events took
	// longer than the budget (7.5s), long before 1000 of them (200s) are handled.
	n := 0
	for w.size == 1000 {
		w.observe(200 * time.Millisecond)
		now = now.Add(200 * time.Millisecond)
		n++
		if r := w.delivered(now); r != 0 {
			assert.Equal(t, -1, r, "shrinks")
		}
	}
	assert.Less(t, n, 40, "shrunk after %d events", n)
	for range 40 { // the average follows within a few windows
		step(200 * time.Millisecond)
	}
	assert.Equal(t, 32, w.size, "slow: 7.5s of budget / 200ms, rounded down to a power of two")
	for range 40 {
		step(time.Microsecond)
	}
	assert.Equal(t, 1000, w.size, "fast again")
}
