package jetbus_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocListsEveryPackage keeps the package list of the package doc (doc.go, "Packages")
// whole: every directory of the module holding Go files is named there, and nothing else.
func TestDocListsEveryPackage(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	row := regexp.MustCompile(`^\t(\S+)\s{2,}\S`)
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			listed[m[1]] = true
		}
	}
	found := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			if path != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			dir := filepath.ToSlash(filepath.Dir(path))
			if dir == "." {
				dir = "jetbus"
			}
			found[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range found {
		if !listed[dir] {
			t.Errorf("package %s is not listed in doc.go's Packages", dir)
		}
	}
	for dir := range listed {
		if !found[dir] {
			t.Errorf("doc.go's Packages lists %s, which holds no Go file", dir)
		}
	}
}
