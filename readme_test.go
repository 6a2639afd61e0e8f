package jetbus_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeImports are the packages README's Go snippets may use without importing them: the
// snippets are declarations (functions, mostly), and this test puts them into one file with
// these imports, each also referenced so that a snippet not using it still compiles.
var readmeImports = map[string]string{
	"context":                              "context.Background",
	"encoding/json":                        "json.Marshal",
	"errors":                               "errors.New",
	"fmt":                                  "fmt.Sprint",
	"log":                                  "log.Println",
	"net/http":                             "http.Get",
	"time":                                 "time.Now",
	"github.com/nats-io/nats.go":           "nats.Connect",
	"github.com/jetbus/jetbus":             "jetbus.WithKey",
	"github.com/jetbus/jetbus/jetstream":   "jetstream.Open",
	"github.com/jetbus/jetbus/partition":   "partition.Subscribe",
	"github.com/jetbus/jetbus/schema":      "schema.Open",
	"github.com/jetbus/jetbus/dlq":         "dlq.Open",
	"github.com/jetbus/jetbus/projection":  "projection.NewTransactional",
	"go.mongodb.org/mongo-driver/v2/mongo": "mongo.Connect",
	"go.mongodb.org/mongo-driver/v2/bson":  "bson.M{}",
	"github.com/nats-io/nats.go/jetstream": "natsjs.New",
	"go.mongodb.org/mongo-driver/v2/mongo/options": "options.Client",
}

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestREADMESnippets: every Go snippet in README.md compiles against this module. The
// snippets go into a throwaway module that requires this one (replaced by this directory)
// at the same dependency versions, and `go vet` checks them.
func TestREADMESnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds README's snippets")
	}
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks, "README has Go snippets")

	root, err := filepath.Abs(".")
	require.NoError(t, err)
	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := strings.Replace(string(mod), "module github.com/jetbus/jetbus", "module readme", 1) +
		"\nrequire github.com/jetbus/jetbus v0.0.0\n\nreplace github.com/jetbus/jetbus => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	var src strings.Builder
	src.WriteString("package readme\n\nimport (\n")
	for path := range readmeImports {
		name := ""
		if path == "github.com/nats-io/nats.go/jetstream" {
			name = "natsjs "
		}
		src.WriteString("\t" + name + `"` + path + "\"\n")
	}
	src.WriteString(")\n\nvar (\n")
	for _, use := range readmeImports {
		src.WriteString("\t_ = " + use + "\n")
	}
	src.WriteString(")\n")
	for i, b := range blocks {
		src.WriteString("\n// README snippet " + "#" + strconv.Itoa(i+1) + "\n" + b[1])
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "readme.go"), []byte(src.String()), 0o644))

	cmd := exec.Command("go", "vet", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "README's Go snippets do not compile:\n%s\n--- the file:\n%s", out, numbered(src.String()))
}

func numbered(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strconv.Itoa(i+1) + "\t" + lines[i]
	}
	return strings.Join(lines, "\n")
}
