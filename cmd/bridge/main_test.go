package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	code, _, stderr := runArgs(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "schema")
	assert.Contains(t, stderr, "lint")
	code, _, _ = runArgs(t, "--help")
	assert.Equal(t, 0, code)
	code, _, stderr = runArgs(t, "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
	code, _, _ = runArgs(t, "schema")
	assert.Equal(t, 2, code)
	code, _, stderr = runArgs(t, "schema", "drop", "x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "unknown subcommand")
	code, _, _ = runArgs(t, "schema", "check")
	assert.Equal(t, 2, code)
	code, _, _ = runArgs(t, "lint")
	assert.Equal(t, 2, code)
	code, _, _ = runArgs(t, "lint", "--nope", ".")
	assert.Equal(t, 2, code)
}

func TestSchemaCheck(t *testing.T) {
	code, stdout, stderr := runArgs(t, "schema", "check", "../../schema/testdata/files/good")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "schemas OK")

	code, _, stderr = runArgs(t, "schema", "check", "../../schema/testdata/files/bad")
	assert.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	assert.GreaterOrEqual(t, len(lines), 10)
	for _, l := range lines {
		assert.Regexp(t, `^\.\./\.\./schema/testdata/files/bad/\S*: .+`, l)
	}
	assert.Contains(t, stderr, "orders.created/v2.json: incompatible with v1 under BACKWARD (backward): /properties/qty/type: TYPE_CHANGED")

	code, _, _ = runArgs(t, "schema", "check", "does/not/exist")
	assert.Equal(t, 1, code)
}

func TestSchemaPush(t *testing.T) {
	s := embeddedtest.NATS(t)
	code, stdout, stderr := runArgs(t, "schema", "push", "--nats-url", s.ClientURL(), "../../schema/testdata/files/good")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "orders.created v3: registered")
	assert.Contains(t, stdout, "users.signedup v1: registered")

	// Idempotent; flags may follow the directory.
	code, stdout, stderr = runArgs(t, "schema", "push", "../../schema/testdata/files/good", "--nats-url", s.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "orders.created v3: unchanged")
	assert.NotContains(t, stdout, "registered")

	code, _, stderr = runArgs(t, "schema", "push", "--nats-url", s.ClientURL(), "../../schema/testdata/files/bad")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "TYPE_CHANGED")

	code, _, stderr = runArgs(t, "schema", "push", "--nats-url", "nats://127.0.0.1:1", "--timeout", "2s", "../../schema/testdata/files/good")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "connect")
}

func TestLint(t *testing.T) {
	code, _, stderr := runArgs(t, "lint", "--schemas", "../../schema/testdata/schemas", "../../schema/testdata/lint/...")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `goapp/main.go:24: invalid topic "Orders.Created"`)
	assert.Contains(t, stderr, `py/worker.py:2: header key "X-Upper"`)
	assert.Contains(t, stderr, "12 finding(s)")

	code, stdout, stderr := runArgs(t, "lint", "--schemas", "../../schema/testdata/schemas", "../../schema/testdata/lint/web/legacy.js")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "lint OK")
}
