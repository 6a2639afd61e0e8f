package jsonenc

import (
	"runtime"
	"strings"
	"testing"
)

func TestWithinDepth(t *testing.T) {
	cases := []struct {
		json string
		max  int
		want bool
	}{
		{`1`, 0, true},
		{`[]`, 0, false},
		{`[]`, 1, true},
		{`{"a":[{"b":[1]}]}`, 4, true},
		{`{"a":[{"b":[1]}]}`, 3, false},
		{`["[[[[[[", "{{{{"]`, 1, true},     // brackets in strings do not count
		{`["\"[[[[", {"k\\":[]}]`, 3, true}, // nor do escaped quotes end a string
		{`["\"[[[[", {"k\\":[]}]`, 2, false},
		{strings.Repeat("[", 129) + strings.Repeat("]", 129), 128, false},
		{strings.Repeat("[", 128) + strings.Repeat("]", 128), 128, true},
	}
	for _, c := range cases {
		if got := WithinDepth([]byte(c.json), c.max); got != c.want {
			t.Errorf("WithinDepth(%.40q, %d) = %v, want %v", c.json, c.max, got, c.want)
		}
	}
}

// TestWithinDepthOfAHostileBody: a megabyte of '[' is refused by a scan that allocates
// nothing and grows no stack.
func TestWithinDepthOfAHostileBody(t *testing.T) {
	b := []byte(strings.Repeat("[", 1<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if WithinDepth(b, 128) {
		t.Fatal("a million levels passed")
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.StackInuse) - int64(before.StackInuse); grew > 256<<10 {
		t.Errorf("the stack grew by %d bytes", grew)
	}
	if n := testing.AllocsPerRun(10, func() { WithinDepth(b, 128) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
