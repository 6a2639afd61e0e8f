package jetbus_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// libraryInternals are the internal packages the libraries (every package outside cmd/,
// examples/, e2e/, bench/ and internal/) may import: small rules with no process in them.
// The others — config, process, ops, cli, wiring, tracing, devenv, devmode — belong to the processes
// (docs/architecture.md, "Internal packages").
var libraryInternals = []string{"internal/retry", "internal/streamscan", "internal/jsonenc", "internal/option",
	"internal/promreg", "internal/mongoname", "internal/spans", "internal/streamcfg"}

func TestLibrariesImportOnlyLibraryInternals(t *testing.T) {
	const module = "github.com/jetbus/jetbus/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if slices.ContainsFunc([]string{"cmd/", "examples/", "e2e", "bench/", "internal/"}, func(p string) bool { return strings.HasPrefix(pkg, p) }) {
			continue
		}
		for _, imp := range fields[1:] {
			rel, ok := strings.CutPrefix(imp, module)
			if ok && strings.HasPrefix(rel, "internal/") && !slices.Contains(libraryInternals, rel) {
				t.Errorf("library package %s imports %s, which belongs to the processes", fields[0], imp)
			}
		}
	}
}
