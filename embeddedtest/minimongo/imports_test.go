package minimongo_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoProductionImports keeps production code off the test backend: outside tests only
// the test helpers (embeddedtest) and the local development environment (internal/devenv)
// may import minimongo.
func TestNoProductionImports(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	allowed := []string{"embeddedtest" + string(filepath.Separator), filepath.Join("internal", "devenv") + string(filepath.Separator)}
	const pkg = "github.com/jetbus/jetbus/embeddedtest/minimongo"
	var offenders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "vendor", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, a := range allowed {
			if strings.HasPrefix(rel, a) {
				return nil
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return nil // a file being edited elsewhere; the compiler reports it
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == pkg || strings.HasPrefix(p, pkg+"/") {
				offenders = append(offenders, rel)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "production code must target a real MongoDB, not the test backend")
}
