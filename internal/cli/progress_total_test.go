package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProgressTotalGrows: work whose total grows (a rebuild while events keep coming) reports
// against the new total, with a rate and a time left while it runs.
func TestProgressTotalGrows(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "rebuild", 100)
	p.Set(50, 0)
	p.SetTotal(200)
	p.Set(150, 0)
	p.Set(200, 0)
	p.Finish()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3, b.String())
	assert.True(t, strings.HasPrefix(lines[0], "rebuild: 50/100 (0 failed) after "), lines[0])
	assert.Contains(t, lines[0], "/s, ETA ")
	assert.True(t, strings.HasPrefix(lines[1], "rebuild: 150/200 (0 failed) after "), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "rebuild: 200/200 (0 failed) after "), lines[2])
	assert.NotContains(t, lines[2], "ETA", "no time left at the end")
}
