package deploy

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/internal/config"
)

// Where things are, relative to this directory.
const (
	repoRoot      = ".."
	exampleConfig = "../examples/jetbus.yaml"
	exampleSchema = "../examples/schemas"
	deployConfig  = "k8s/base/jetbus.yaml"
	deploySchemas = "k8s/base/schemas"
)

// images are the Dockerfile's final stages (build targets) and the image each is published as.
var images = map[string]string{
	"bridge":    "jetbus/bridge",
	"projector": "jetbus/projector",
}

// container is what one jetbus process sees in its container: files mounted at absolute
// paths, its environment and its arguments.
type container struct {
	// Files maps a path in the container to its content.
	Files map[string][]byte
	Env   map[string]string
	Args  []string
}

// load loads the configuration as the process in c would at start (`run --config FILE`, the
// environment on top), with the container's files laid out under a temporary directory. The
// paths in the configuration it returns are the container's.
func (c container) load(t *testing.T) (*config.Config, error) {
	t.Helper()
	root := t.TempDir()
	for p, data := range c.Files {
		require.True(t, filepath.IsAbs(p), "mount path %q", p)
		dst := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, data, 0o644))
	}
	// The tests know only `run --config FILE`; a new flag should be mapped here, not ignored.
	require.Len(t, c.Args, 3, "args %q: want run --config FILE", c.Args)
	require.Equal(t, []string{"run", "--config"}, c.Args[:2], "args %q", c.Args)
	file := c.Args[2]
	require.Contains(t, c.Files, file, "--config %s is not a mounted file", file)

	var environ []string
	for k, v := range c.Env {
		if filepath.IsAbs(v) {
			v = filepath.Join(root, v) // a path in the container
		}
		environ = append(environ, k+"="+v)
	}
	cfg, err := config.Load(config.Options{File: filepath.Join(root, file), Environ: environ})
	if cfg != nil {
		unroot(reflect.ValueOf(cfg).Elem(), root)
	}
	return cfg, err
}

// unroot removes the prefix root from every string in v that has it.
func unroot(v reflect.Value, root string) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); strings.HasPrefix(s, root+string(filepath.Separator)) && v.CanSet() {
			v.SetString(strings.TrimPrefix(s, root))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				unroot(v.Field(i), root)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			unroot(v.Index(i), root)
		}
	}
}

// dirFiles returns the regular files under dir, keyed by their slash-separated path relative
// to dir.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = data
		return err
	})
	require.NoError(t, err)
	return files
}

// listenPort is the port of http.addr, and whether it listens on every interface (as a
// container must, for probes from outside it).
func listenPort(t *testing.T, addr string) (port int, allInterfaces bool) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	port, err = strconv.Atoi(p)
	require.NoError(t, err)
	return port, host == "" || host == "0.0.0.0" || host == "::"
}

// nonRootUser reports whether a USER / runAsUser value names a user other than root.
func nonRootUser(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(u); err == nil {
		return n > 0
	}
	return u != "" && u != "root"
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
