package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	dockerfilePath = "Dockerfile"
	// binDir is where the images hold the binaries; the build stage writes them to /out/.
	binDir = "/usr/local/bin/"
	// probePath is the health check probe in both images (compose's healthcheck runs it).
	probePath = binDir + "healthcheck"
	// imageConfigPath is where the images' default command reads the configuration.
	imageConfigPath = "/etc/jetbus/jetbus.yaml"
)

// dockerfile is deploy/Dockerfile as BuildKit's parser reads it.
type dockerfile struct {
	stages []instructions.Stage
}

func parseDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	res, err := parser.Parse(bytes.NewReader(data))
	require.NoError(t, err)
	stages, _, err := instructions.Parse(res.AST, nil)
	require.NoError(t, err)
	return &dockerfile{stages: stages}
}

func (d *dockerfile) stage(name string) *instructions.Stage {
	for i := range d.stages {
		if d.stages[i].Name == name {
			return &d.stages[i]
		}
	}
	return nil
}

// commands returns the stage's commands of type T.
func commands[T instructions.Command](s *instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// user is the user a target's container runs as: its stage's last USER.
func (d *dockerfile) user(t *testing.T, target string) string {
	t.Helper()
	s := d.stage(target)
	require.NotNil(t, s, "no stage %s", target)
	users := commands[*instructions.UserCommand](s)
	require.NotEmpty(t, users, "stage %s has no USER: it would run as its base image's user", target)
	return users[len(users)-1].User
}

// offlineImages answers BuildKit's base image look-ups without a registry: an empty image of
// the platform asked for. The lint rules need the stages, not the images' contents.
type offlineImages struct{}

func (offlineImages) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	img := map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{}}
	if opt.ImageOpt != nil && opt.ImageOpt.Platform != nil {
		img["architecture"], img["os"] = opt.ImageOpt.Platform.Architecture, opt.ImageOpt.Platform.OS
	}
	dt, err := json.Marshal(img)
	return ref, digest.FromBytes(dt), dt, err
}

// TestDockerfileLint runs BuildKit's Dockerfile checks (`docker build --check`: every rule,
// every stage) offline, and wants no warning.
func TestDockerfileLint(t *testing.T) {
	data, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	src := llb.NewSourceMap(nil, dockerfilePath, "Dockerfile", data)
	src.Definition = &llb.Definition{} // where the Dockerfile came from: nowhere but here
	res, err := dockerfile2llb.DockerfileLint(context.Background(), data, dockerfile2llb.ConvertOpt{
		SourceMap:    src,
		MetaResolver: offlineImages{},
	})
	require.NoError(t, err)
	if res.Error != nil {
		t.Errorf("the Dockerfile does not build: %s (line %v)", res.Error.Message, res.Error.Location.Ranges)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		t.Errorf("%s:%d: %s: %s (%s)", dockerfilePath, line, w.RuleName, w.Detail, w.URL)
	}
}

// TestDockerfileImages: a build stage and one final stage per binary; each final stage is a
// distroless/static or scratch image (no shell), runs as a non-root user, holds its binary and
// the probe, starts the binary with the configuration at imageConfigPath and exposes the ops
// port.
func TestDockerfileImages(t *testing.T) {
	d := parseDockerfile(t)
	build := d.stage("build")
	require.NotNil(t, build, "no build stage")
	assert.True(t, strings.HasPrefix(build.BaseName, "golang:"), "build stage FROM %s", build.BaseName)

	for target := range images {
		t.Run(target, func(t *testing.T) {
			s := d.stage(target)
			require.NotNil(t, s, "no stage %s (build target)", target)
			assert.Nil(t, d.stage(s.BaseName), "stage %s builds on stage %s: the toolchain would ship", target, s.BaseName)
			assert.True(t, s.BaseName == "scratch" || strings.HasPrefix(s.BaseName, "gcr.io/distroless/static"),
				"stage %s FROM %s: want distroless/static or scratch", target, s.BaseName)
			assert.True(t, nonRootUser(d.user(t, target)), "stage %s runs as USER %s", target, d.user(t, target))

			var copied []string
			for _, c := range commands[*instructions.CopyCommand](s) {
				if c.From == "build" {
					for _, src := range c.SourcePaths {
						copied = append(copied, filepath.Join(c.DestPath, filepath.Base(src)))
					}
				}
			}
			assert.ElementsMatch(t, []string{binDir + target, probePath}, copied, "files copied from the build stage")

			eps := commands[*instructions.EntrypointCommand](s)
			require.Len(t, eps, 1, "ENTRYPOINT of %s", target)
			assert.False(t, eps[0].PrependShell, "ENTRYPOINT in shell form: there is no shell")
			assert.Equal(t, []string{binDir + target}, eps[0].CmdLine)
			cmds := commands[*instructions.CmdCommand](s)
			require.Len(t, cmds, 1, "CMD of %s", target)
			assert.False(t, cmds[0].PrependShell, "CMD in shell form: there is no shell")
			assert.Equal(t, []string{"run", "--config", imageConfigPath}, cmds[0].CmdLine)

			var ports []string
			for _, e := range commands[*instructions.ExposeCommand](s) {
				ports = append(ports, e.Ports...)
			}
			assert.Equal(t, []string{"8080"}, ports, "EXPOSE of %s", target)
		})
	}
}

// devTag matches a -tags flag that names the dev tag.
var devTag = regexp.MustCompile(`-tags[= ]+["']?[\w,]*\bdev\b`)

// TestDockerfileProductionBuild: the binaries are production builds — no dev tag (so neither
// the embedded nats-server nor the MongoDB test backend is linked), CGO off (static) — and the
// probe imports only the standard library, so its build needs none of deploy/go.mod's modules.
func TestDockerfileProductionBuild(t *testing.T) {
	d := parseDockerfile(t)
	build := d.stage("build")
	require.NotNil(t, build)

	cgoOff := false
	for _, e := range commands[*instructions.EnvCommand](build) {
		for _, kv := range e.Env {
			if kv.Key == "CGO_ENABLED" {
				cgoOff = kv.Value == "0"
			}
		}
	}
	var builds []string
	for _, r := range commands[*instructions.RunCommand](build) {
		line := strings.Join(r.CmdLine, " ")
		if strings.Contains(line, "go build") {
			builds = append(builds, line)
			assert.NotRegexp(t, devTag, line, "a dev build")
			if strings.Contains(line, "CGO_ENABLED=") {
				cgoOff = strings.Contains(line, "CGO_ENABLED=0")
			}
		}
	}
	assert.True(t, cgoOff, "CGO_ENABLED=0 is not set in the build stage")
	require.Len(t, builds, 2, "go build commands: %q", builds)
	assert.Contains(t, builds[0], "-o /out/ ./cmd/bridge ./cmd/projector")
	assert.Contains(t, builds[1], "cd deploy && ")
	assert.Contains(t, builds[1], "-o /out/ ./healthcheck")

	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./healthcheck").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []string{"github.com/jetbus/jetbus/deploy/healthcheck"}, strings.Fields(string(out)),
		"the probe imports packages outside the standard library")

	// The toolchain of the image can build both modules.
	args := parseDockerfileArgs(t)
	assert.Equal(t, goMinor(t, "../go.mod"), args["GO_VERSION"], "ARG GO_VERSION against the go directive of ../go.mod")
	assert.Equal(t, goMinor(t, "go.mod"), args["GO_VERSION"], "ARG GO_VERSION against the go directive of go.mod")
}

// parseDockerfileArgs returns the Dockerfile's global ARGs with their defaults.
func parseDockerfileArgs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	res, err := parser.Parse(bytes.NewReader(data))
	require.NoError(t, err)
	_, metaArgs, err := instructions.Parse(res.AST, nil)
	require.NoError(t, err)
	args := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			args[kv.Key] = kv.ValueString()
		}
	}
	return args
}

// goMinor is the major.minor of a go.mod's go directive (the golang image tag that builds it
// floats to that line's latest patch release).
func goMinor(t *testing.T, gomod string) string {
	t.Helper()
	data, err := os.ReadFile(gomod)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(data)
	require.NotNil(t, m, "%s has no go directive", gomod)
	return string(m[1])
}

// TestDockerignoreKeepsTheBuildInputs: the root .dockerignore keeps every file the image
// build compiles (the production binaries' packages, by `go list`, and the probe) and leaves
// out what it means to.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	require.NoError(t, err)
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	require.NoError(t, err)
	pm, err := patternmatcher.New(patterns)
	require.NoError(t, err)
	ignored := func(p string) bool {
		ok, err := pm.MatchesOrParentMatches(p)
		require.NoError(t, err)
		return ok
	}

	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-deps", "-f",
		"{{if and (not .Standard) .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{\"\\n\"}}{{end}}{{end}}",
		"./cmd/bridge", "./cmd/projector")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	needed := []string{"go.mod", "go.sum", "deploy/go.mod", "deploy/go.sum", "deploy/healthcheck/main.go"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		dir, err := filepath.Rel(root, fields[0])
		require.NoError(t, err)
		for _, f := range fields[1:] {
			needed = append(needed, filepath.ToSlash(filepath.Join(dir, f)))
		}
	}
	require.Greater(t, len(needed), 20, "go list found too few files: %s", out)
	for _, p := range needed {
		assert.False(t, ignored(p), ".dockerignore leaves out %s, which the build needs", p)
	}

	for _, p := range []string{".git/HEAD", "bin/bridge", "data/jetstream/x", "deploy/compose.yaml",
		"deploy/k8s/base/jetbus.yaml", "deploy/healthcheck/main_test.go", "docs/config.md", "README.md",
		"cmd/bridge/main_test.go"} {
		assert.True(t, ignored(p), ".dockerignore keeps %s", p)
	}
	assert.True(t, slices.Contains(patterns, ".git"))
}
