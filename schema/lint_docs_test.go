package schema_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/schema"
)

var fence = regexp.MustCompile("(?s)```(js|python)\n(.*?)```")

// TestLintWireExamples: the wire contract's own client examples (docs/wire.md) follow the
// contract, so lint finds nothing in them; the same client publishing to a bare topic subject
// is one finding.
func TestLintWireExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/wire.md")
	require.NoError(t, err)
	blocks := fence.FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(blocks), 4, "docs/wire.md's js and python examples")
	dir := t.TempDir()
	ext := map[string]string{"js": ".js", "python": ".py"}
	for i, b := range blocks {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "example"+string(rune('a'+i))+ext[string(b[1])]), b[2], 0o600))
	}
	findings, err := schema.Lint(schema.LintOptions{}, dir)
	require.NoError(t, err)
	assert.Empty(t, findings, "the wire contract's examples")

	bare := filepath.Join(dir, "bare.js")
	require.NoError(t, os.WriteFile(bare, []byte(`await js.publish("orders", JSON.stringify({ id: 1 }), { headers: h });`+"\n"), 0o600))
	findings, err = schema.Lint(schema.LintOptions{}, bare)
	require.NoError(t, err)
	require.Len(t, findings, 1)
	assert.Contains(t, findings[0].Message, `publish to the bare topic "orders"`)
}
