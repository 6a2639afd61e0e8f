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

	"github.com/jetbus/jetbus/internal/cli"
)

var update = flag.Bool("update", false, "rewrite README.md's projector reference")

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpEverywhere(t *testing.T) {
	cli.Visit(cli.Prepare(newRoot()), func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(c.CommandPath(), func(t *testing.T) {
			code, out, errOut := runArgs(t, append(path, "--help")...)
			assert.Equal(t, 0, code, errOut)
			assert.Contains(t, out, c.UseLine())
		})
	})
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "projector needs a command"},
		{"unknown command", []string{"rebuilt"}, `unknown command "rebuilt" for "projector"`},
		{"unknown flag", []string{"run", "--nats"}, "unknown flag: --nats"},
		{"rebuild without a name", []string{"rebuild"}, "projector rebuild needs NAME"},
		{"rebuild of two", []string{"rebuild", "a", "b"}, `unexpected "b"`},
		{"rebuild of an undeclared projection", []string{"rebuild", "--config", "../../examples/jetbus.yaml", "orders"}, `unknown projection "orders" (declared: orders-view)`},
		{"run takes no arguments", []string{"run", "now"}, `projector run takes no arguments; got "now"`},
		{"bad log level", []string{"run", "--log-level", "chatty"}, `invalid argument "chatty" for "--log-level" flag`},
		{"bad http address", []string{"run", "--http-addr", "8080"}, `flag --http-addr: http.addr: "8080" is not host:port`},
		{"dev in a production build", []string{"run", "--dev"}, "--dev needs a dev build"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runArgs(t, tc.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

func TestConfigErrorsAtStart(t *testing.T) {
	bad := t.TempDir() + "/bad.yaml"
	require.NoError(t, os.WriteFile(bad, []byte("views:\n  - name: v\n    projection: nope\n"), 0o644))
	code, _, errOut := runArgs(t, "run", "--config", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, bad+`:3:5: views[0].projection: projection "nope" is not declared`)
}

func TestREADMEReference(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	want := cli.Reference(newRoot())
	if *update {
		out, ok := cli.ReplaceSection(string(doc), "projector", want)
		require.True(t, ok, "README.md has no projector reference markers")
		require.NoError(t, os.WriteFile("../../README.md", []byte(out), 0o644))
		doc = []byte(out)
	}
	got, ok := cli.Section(string(doc), "projector")
	require.True(t, ok, "README.md has no projector reference markers")
	assert.Equal(t, want, got, "README.md's projector reference differs from the commands: run make docs")
}
