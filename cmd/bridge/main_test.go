package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/cli"
)

var update = flag.Bool("update", false, "rewrite README.md's bridge reference")

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelpEverywhere runs --help on every command: exit 0, the usage on stdout.
func TestHelpEverywhere(t *testing.T) {
	n := 0
	cli.Visit(cli.Prepare(newRoot()), func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(c.CommandPath(), func(t *testing.T) {
			code, out, errOut := runArgs(t, append(path, "--help")...)
			assert.Equal(t, 0, code, errOut)
			assert.Contains(t, out, "Usage:")
			assert.Contains(t, out, c.UseLine())
		})
		n++
	})
	assert.GreaterOrEqual(t, n, 16, "every command visited")
	code, out, _ := runArgs(t, "help", "dlq", "list")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "--reason")
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "bridge needs a command"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate" for "bridge"`},
		{"unknown subcommand", []string{"dlq", "frob"}, `unknown command "frob" for "bridge dlq"`},
		{"missing subcommand", []string{"schema"}, "bridge schema needs a command: check, push"},
		{"unknown flag", []string{"lint", "--nope", "."}, "unknown flag: --nope"},
		{"unknown shorthand", []string{"status", "-z"}, "unknown shorthand flag: 'z' in -z"},
		{"missing argument", []string{"schema", "check"}, "bridge schema check needs DIR"},
		{"extra argument", []string{"schema", "check", "a", "b"}, `unexpected "b"`},
		{"extra argument to a command without any", []string{"status", "now"}, `bridge status takes no arguments; got "now"`},
		{"no paths", []string{"lint"}, "needs at least one PATH"},
		{"bad enum", []string{"dlq", "list", "--reason", "bogus"}, `invalid argument "bogus" for "--reason" flag: must be one of max-attempts`},
		{"bad log level", []string{"status", "--log-level", "loud"}, `invalid argument "loud" for "--log-level" flag`},
		{"bad time", []string{"dlq", "count", "--since", "yesterday"}, `invalid argument "yesterday" for "--since" flag: want an RFC 3339 time`},
		{"until before since", []string{"dlq", "list", "--since", "1h", "--until", "2h"}, "--until (20"},
		{"bad number", []string{"dlq", "list", "--limit", "ten"}, `invalid argument "ten" for "--limit" flag`},
		{"flag needs a value", []string{"dlq", "list", "--topic"}, "flag needs an argument: --topic"},
		{"bad sequence", []string{"dlq", "show", "x"}, `SEQ "x" is not a sequence number`},
		{"bad URL flag", []string{"status", "--nats-url", "http://x"}, `flag --nats-url: nats.urls[0]: "http://x": scheme must be nats`},
		{"dev in a production build", []string{"run", "--dev"}, "--dev needs a dev build"},
		{"push without a directory", []string{"schema", "push"}, "bridge schema push needs DIR"},
		{"completion shell", []string{"completion", "tcsh"}, `unknown command "tcsh"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runArgs(t, tc.args...)
			assert.Equal(t, 2, code, "stdout %q stderr %q", out, errOut)
			assert.Contains(t, errOut, tc.want)
			assert.Contains(t, errOut, "--help' for usage")
			assert.NotContains(t, errOut, "m=", "times print without Go's monotonic clock")
		})
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := runArgs(t, "completion", sh)
		assert.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "bridge", sh)
	}
	code, out, _ := runArgs(t, "__complete", "dlq", "list", "--reason", "")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "max-deliveries")
}

// TestREADMEReference fails when README.md's bridge reference is not what the commands
// generate; `make docs` rewrites it.
func TestREADMEReference(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	want := cli.Reference(newRoot())
	if *update {
		out, ok := cli.ReplaceSection(string(doc), "bridge", want)
		require.True(t, ok, "README.md has no bridge reference markers")
		require.NoError(t, os.WriteFile("../../README.md", []byte(out), 0o644))
		doc = []byte(out)
	}
	got, ok := cli.Section(string(doc), "bridge")
	require.True(t, ok, "README.md has no bridge reference markers")
	assert.Equal(t, want, got, "README.md's bridge reference differs from the commands: run make docs")
}

func TestConfigCheck(t *testing.T) {
	code, out, errOut := runArgs(t, "config", "check", "../../examples/jetbus.yaml")
	assert.Equal(t, 0, code, errOut)
	assert.Equal(t, "../../examples/jetbus.yaml: OK\n", out)

	bad := t.TempDir() + "/bad.yaml"
	require.NoError(t, os.WriteFile(bad, []byte("topics:\n  - name: orders\n    partitons: 4\nviews:\n  - name: v\n    projection: nope\n"), 0o644))
	code, out, errOut = runArgs(t, "config", "check", bad)
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Equal(t, bad+`:3:5: topics[0].partitons: unknown key "partitons" (did you mean "partitions"?)`+"\n"+
		bad+`:6:5: views[0].projection: projection "nope" is not declared in projections (none declared)`+"\n"+
		"2 error(s)\n", errOut)

	code, _, errOut = runArgs(t, "config", "check", "does/not/exist.yaml")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no such file")
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

	// The configuration's schemas directory when DIR is left out.
	code, stdout, stderr = runArgs(t, "schema", "push", "--config", "../../examples/jetbus.yaml", "--nats-url", s.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "orders v1: registered")

	code, _, stderr = runArgs(t, "schema", "push", "--nats-url", "nats://127.0.0.1:1", "--timeout", "2s", "../../schema/testdata/files/good")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "connect")
}

func TestLint(t *testing.T) {
	code, _, stderr := runArgs(t, "lint", "--schemas", "../../schema/testdata/schemas", "../../schema/testdata/lint/...")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `goapp/main.go:24: invalid topic "Orders.Created"`)
	assert.Contains(t, stderr, `py/worker.py:2: header key "X-Upper"`)
	assert.Contains(t, stderr, "14 finding(s)")

	code, stdout, stderr := runArgs(t, "lint", "--schemas", "../../schema/testdata/schemas", "../../schema/testdata/lint/web/legacy.js")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "lint OK")
}
