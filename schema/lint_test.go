package schema_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/schema"
)

func TestLint(t *testing.T) {
	findings, err := schema.Lint(schema.LintOptions{SchemasDir: "testdata/schemas"}, "testdata/lint/...")
	require.NoError(t, err)
	var got []string
	for _, f := range findings {
		rel, err := filepath.Rel("testdata/lint", f.File)
		require.NoError(t, err)
		got = append(got, filepath.ToSlash(rel)+":"+strconv.Itoa(f.Line)+": "+f.Message)
	}
	want := []string{
		`goapp/main.go:24: invalid topic "Orders.Created"`,
		`goapp/main.go:25: header key "Trace-Id" is not a valid custom header`,
		`goapp/main.go:26: topic "payments.settled" has no schema in testdata/schemas`,
		`goapp/main.go:28: invalid topic "dlq.orders"`,
		`goapp/main.go:28: header key "x-key" is not a valid custom header`,
		`goapp/nats.go:9: publish to the bare topic "orders.created"`,
		`goapp/nats.go:11: ingress subject "in.orders.created.p2" names a partition`,
		`py/worker.py:2: header key "X-Upper" is not a valid custom header`,
		`py/worker.py:3: ingress subject "in.shipments.Sent": invalid topic`,
		`py/worker.py:4: invalid subject "dlq.orders"`,
		`py/worker.py:5: publish to the bare topic "orders.created"`,
		`web/client.ts:4: header key "Content-Language" is not a valid custom header`,
		`web/client.ts:5: invalid subject "orders_created.p0"`,
		`web/client.ts:7: topic "inventory.reserved" has no schema in testdata/schemas`,
	}
	require.Len(t, got, len(want), "findings:\n%s", joinLines(got))
	for i := range want {
		assert.Contains(t, got[i], want[i])
	}
	assert.Contains(t, findings[0].String(), "main.go:24: invalid topic")

	// Without a schemas dir, only names are checked.
	findings, err = schema.Lint(schema.LintOptions{}, "testdata/lint/web/client.ts", "testdata/lint/web/legacy.js")
	require.NoError(t, err)
	require.Len(t, findings, 2)

	// A clean file has no findings; a missing path is an error.
	findings, err = schema.Lint(schema.LintOptions{SchemasDir: "testdata/schemas"}, "testdata/lint/web/legacy.js")
	require.NoError(t, err)
	assert.Empty(t, findings)
	_, err = schema.Lint(schema.LintOptions{}, "testdata/nope")
	require.Error(t, err)
	_, err = schema.Lint(schema.LintOptions{SchemasDir: "testdata/nope"}, "testdata/lint")
	require.Error(t, err)
}

func joinLines(s []string) string { return strings.Join(s, "\n") }
