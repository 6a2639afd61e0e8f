// Package cmdtest tests the bridge and projector binaries as an operator runs them: built with
// go build, started as processes, stopped with signals.
package cmdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testBackend are the packages a production binary must not contain.
var testBackend = []string{
	"github.com/jetbus/jetbus/embeddedtest",
	"github.com/jetbus/jetbus/embeddedtest/minimongo",
	"github.com/jetbus/jetbus/internal/devenv",
	"github.com/nats-io/nats-server/v2/server",
}

// testOnly are the packages only tests use: no binary, production or dev, contains them.
var testOnly = []string{
	"github.com/chromedp/chromedp", // browser_test.go's DevTools driver
	"github.com/chromedp/cdproto/cdp",
}

func deps(t *testing.T, tags ...string) map[string]bool {
	t.Helper()
	args := []string{"list", "-deps"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, "../bridge", "../projector")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		m[l] = true
	}
	return m
}

// TestProductionBuildHasNoTestBackend: without the dev tag, neither binary links the MongoDB
// test backend or nats-server; with it, both do (so the check can fail). Neither build links
// what only tests use (the browser driver).
func TestProductionBuildHasNoTestBackend(t *testing.T) {
	prod := deps(t)
	require.True(t, prod["github.com/jetbus/jetbus/internal/devmode"], "the listing covers the binaries")
	for _, p := range testBackend {
		assert.False(t, prod[p], "a production build imports %s", p)
	}
	dev := deps(t, "dev")
	for _, p := range testBackend {
		assert.True(t, dev[p], "a dev build does not import %s", p)
	}
	for _, p := range testOnly {
		assert.False(t, prod[p], "a production build imports %s", p)
		assert.False(t, dev[p], "a dev build imports %s", p)
	}
}

var (
	buildOnce sync.Map // tags → *built
)

type built struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// binaries builds bridge, projector and jetbus-dev (with tags) once per test binary and returns their
// directory.
func binaries(t *testing.T, tags string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(tags, &built{})
	b := v.(*built)
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "jetbus-bin-")
		if b.err != nil {
			return
		}
		args := []string{"build", "-o", b.dir + string(filepath.Separator)}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		b.out, b.err = exec.Command("go", append(args, "../bridge", "../projector", "../jetbus-dev")...).CombinedOutput()
	})
	require.NoError(t, b.err, "go build: %s", b.out)
	return b.dir
}

func TestMain(m *testing.M) {
	if url := os.Getenv(watchProbeEnv); url != "" { // TestWatchLoad's probe
		os.Exit(runWatchProbe(url, os.Getenv(watchProbeTokenEnv)))
	}
	if dir := os.Getenv(watchBackendsEnv); dir != "" { // TestWatchLoad's NATS and MongoDB
		os.Exit(runWatchBackends(dir))
	}
	code := m.Run()
	buildOnce.Range(func(_, v any) bool {
		if b := v.(*built); b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
		return true
	})
	os.Exit(code)
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
