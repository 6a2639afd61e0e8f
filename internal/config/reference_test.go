package config

import (
	"flag"
	"os"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the declarations")

const referencePath = "../../docs/config.md"

// TestReference fails when docs/config.md is not what the declarations generate; `make docs`
// (go test ./internal/config -run TestReference -update) rewrites it.
func TestReference(t *testing.T) {
	want := Reference()
	if *update {
		require.NoError(t, os.MkdirAll("../../docs", 0o755))
		require.NoError(t, os.WriteFile(referencePath, []byte(want), 0o644))
	}
	got, err := os.ReadFile(referencePath)
	require.NoError(t, err, "run make docs")
	assert.Equal(t, want, string(got), "docs/config.md differs from internal/config/config.go: run make docs")
}

// TestDeclarations checks every declared default and example against its own field, so the
// reference cannot show a value the loader refuses.
func TestDeclarations(t *testing.T) {
	var walk func(t *testing.T, typ reflect.Type, path string)
	walk = func(t *testing.T, typ reflect.Type, path string) {
		for _, f := range fieldsOf(typ) {
			p := joinKey(path, f.key)
			assert.NotEmpty(t, f.desc, "%s has no description", p)
			for what, text := range map[string]string{"default": f.def, "example": f.example} {
				if text == "" {
					continue
				}
				var n yaml.Node
				require.NoError(t, yaml.Unmarshal([]byte(text), &n), "%s %s", p, what)
				yf := &yamlFile{env: func(string) (string, bool) { return "x", true }, pos: map[string]pos{}}
				raw := yf.plain(n.Content[0], p)
				require.Empty(t, yf.errs)
				var is issues
				is.decode(p, raw, reflect.New(f.typ).Elem(), &f)
				assert.Empty(t, is, "%s %s %q", p, what, text)
			}
			switch {
			case f.typ.Kind() == reflect.Struct && f.typ != timeType:
				walk(t, f.typ, p)
			case f.typ.Kind() == reflect.Slice && f.typ.Elem().Kind() == reflect.Struct:
				walk(t, f.typ.Elem(), p+"[]")
			}
		}
	}
	walk(t, reflect.TypeFor[Config](), "")
}

func TestEnvNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for name, k := range envPaths() {
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s both read %s", k.path, other, name)
		}
		seen[name] = k.path
	}
	assert.Equal(t, "nats.tls.ca", envPaths()["JETBUS_NATS_TLS_CA"].path)
	assert.Equal(t, "schemas", envPaths()["JETBUS_SCHEMAS"].path)
	_, ok := envPaths()["JETBUS_TOPICS"]
	assert.False(t, ok, "lists of mappings come from the file only")
}
