package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProgressLinesWhenNotATerminal(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "replay", 250)
	for i := 0; i <= 250; i++ {
		p.Set(i, i/100)
	}
	p.Set(250, 2) // reported once
	p.Finish()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 10, "a line at every tenth: %s", b.String())
	assert.True(t, strings.HasPrefix(lines[0], "replay: 25/250 (0 failed) after "), lines[0])
	assert.True(t, strings.HasPrefix(lines[9], "replay: 250/250 (2 failed) after "), lines[9])
	assert.False(t, IsTerminal(&b))
}

func TestTimeFlag(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in, want, err string
	}{
		{"2h", "2026-03-01T10:00:00Z", ""},
		{"7d", "2026-02-22T12:00:00Z", ""},
		{"2026-01-02T03:04:05+01:00", "2026-01-02T03:04:05+01:00", ""},
		{"yesterday", "", "want an RFC 3339 time"},
		{"-1h", "", "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			f := &Time{now: func() time.Time { return now }}
			err := f.Set(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.String())
		})
	}
	// From the real clock: no monotonic reading left to print.
	var f Time
	require.NoError(t, f.Set("1h"))
	assert.NotContains(t, f.T.String(), "m=")
}

func TestEnum(t *testing.T) {
	e := &Enum{Allowed: []string{"a", "b"}}
	assert.NoError(t, e.Set("b"))
	assert.Equal(t, "b", e.String())
	assert.EqualError(t, e.Set("c"), "must be one of a, b")
}
