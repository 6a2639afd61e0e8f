package deploy

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const composeFile = "compose.yaml"

// loadCompose loads compose.yaml as `docker compose` does — compose-go validates it against
// the Compose Specification's JSON schema and checks its consistency (dependencies, volumes)
// — with paths resolved and, of this machine's environment, only the NATS users' passwords
// (the tests', natsPassword), which the file requires.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadComposeWith(composeEnv())
	require.NoError(t, err, "compose-go refuses %s", composeFile)
	return p
}

func loadComposeWith(env []string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{composeFile}, cli.WithWorkingDirectory("."), cli.WithResolvedPaths(true), cli.WithEnv(env))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// composeEnv is the environment docker compose runs in: every NATS user's password.
func composeEnv() []string {
	var env []string
	for _, u := range natsUsers {
		env = append(env, natsPasswordEnv(u)+"="+natsPassword(u))
	}
	return env
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	require.True(t, ok, "no service %s", name)
	return s
}

// flagValue is the value after flag in args.
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// bindSource is the host path bound at target in s, read-only.
func bindSource(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			assert.Equal(t, types.VolumeTypeBind, v.Type, "%s: %s is not a bind mount", s.Name, target)
			assert.True(t, v.ReadOnly, "%s: %s is writable", s.Name, target)
			_, err := os.Stat(v.Source)
			require.NoError(t, err, "%s: the source of %s", s.Name, target)
			return v.Source
		}
	}
	t.Fatalf("%s mounts nothing at %s", s.Name, target)
	return ""
}

// namedVolumeAt asserts that s keeps dir in a named volume of the project.
func namedVolumeAt(t *testing.T, p *types.Project, s types.ServiceConfig, dir string) {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == dir {
			assert.Equal(t, types.VolumeTypeVolume, v.Type, "%s: %s is not a named volume", s.Name, dir)
			assert.Contains(t, p.Volumes, v.Source, "%s: volume %s is not declared", s.Name, v.Source)
			return
		}
	}
	t.Errorf("%s keeps %s in no volume: its data would not survive the container", s.Name, dir)
}

// healthURL is the URL a service's health check command requests (after the probe binary
// or wget's options).
func healthURL(t *testing.T, s types.ServiceConfig) *url.URL {
	t.Helper()
	require.NotNil(t, s.HealthCheck, "%s has no health check", s.Name)
	test := s.HealthCheck.Test
	require.GreaterOrEqual(t, len(test), 2, "%s: health check %q", s.Name, test)
	assert.Equal(t, "CMD", test[0], "%s: health check %q: the images have no shell", s.Name, test)
	u, err := url.Parse(test[len(test)-1])
	require.NoError(t, err)
	require.Equal(t, "http", u.Scheme, "%s: health check %q", s.Name, test)
	return u
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	want := append([]string{"mongo1", "mongo2", "mongo3", "mongo-init", "bridge", "projector"}, natsNodes...)
	assert.ElementsMatch(t, want, p.ServiceNames())
}

// TestComposeNATSCluster: three NATS services, each running its file of deploy/nats (which
// TestNATSConfigs checks), routed to each other by their service names, storing JetStream in
// a named volume, health-checked on its monitoring port, running the nats-server version
// jetbus's tests embed; jetbus's processes connect to all three.
func TestComposeNATSCluster(t *testing.T) {
	p := loadCompose(t)
	var urls []string
	for _, node := range natsNodes {
		s := service(t, p, node)
		image, tag, _ := strings.Cut(s.Image, ":")
		assert.Equal(t, "nats", image)
		assert.Equal(t, natsServerVersion(t)+"-alpine", tag, "%s: the nats-server version jetbus's tests run against", node)

		file := bindSource(t, s, flagValue(s.Command, "--config"))
		want, err := filepath.Abs(natsConfigFile(node))
		require.NoError(t, err)
		assert.Equal(t, want, file, "%s runs another node's file", node)
		o := natsOptions(t, file)
		for _, r := range o.Routes {
			assert.Contains(t, natsNodes, r.Hostname(), "route %s is not a NATS service", r)
			assert.Contains(t, p.Services, r.Hostname())
		}
		namedVolumeAt(t, p, s, o.StoreDir)

		u := healthURL(t, s)
		assert.Equal(t, "/healthz", u.Path)
		assert.Equal(t, strconv.Itoa(o.HTTPPort), u.Port(), "%s: health check port", node)
		urls = append(urls, natsURL(node, o.Port))
	}
	for target := range images {
		s := service(t, p, target)
		require.NotNil(t, s.Environment["JETBUS_NATS_URLS"], "%s: JETBUS_NATS_URLS", target)
		assert.ElementsMatch(t, urls, strings.Split(*s.Environment["JETBUS_NATS_URLS"], ","), "%s: JETBUS_NATS_URLS", target)
	}
}

// includes are the files a NATS configuration includes, as written.
var includes = regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s;]+)"?`)

// TestComposeNATSUsers: NATS requires the users of nats/auth.conf, mounted beside each node's
// file where its include finds it, with the passwords compose passes from its own
// environment (none is in the file, and compose refuses to start without them); the bridge
// and the projectors log in as their users, their replies on their inbox prefixes.
func TestComposeNATSUsers(t *testing.T) {
	p := loadCompose(t)
	auth, err := filepath.Abs(natsAuthFile)
	require.NoError(t, err)
	for _, node := range natsNodes {
		s := service(t, p, node)
		conf := flagValue(s.Command, "--config")
		data, err := os.ReadFile(natsConfigFile(node))
		require.NoError(t, err)
		inc := includes.FindAllStringSubmatch(string(data), -1)
		require.Len(t, inc, 1, "%s includes one file", node)
		target := filepath.Join(filepath.Dir(conf), inc[0][1])
		assert.Equal(t, auth, bindSource(t, s, target), "%s: %s includes %s, which must be %s", node, conf, target, natsAuthFile)
		for _, u := range natsUsers {
			v := s.Environment[natsPasswordEnv(u)]
			require.NotNil(t, v, "%s: %s, which %s reads", node, natsPasswordEnv(u), natsAuthFile)
			assert.Equal(t, natsPassword(u), *v, "%s: %s comes from compose's environment", node, natsPasswordEnv(u))
		}
	}
	for target := range images {
		s := service(t, p, target)
		cfg, err := composeContainer(t, s).load(t)
		require.NoError(t, err)
		assert.Equal(t, target, cfg.NATS.User, "%s logs in as its user", target)
		assert.Equal(t, natsPassword(target), cfg.NATS.Password, "%s: the password NATS has for %s", target, target)
		assert.Equal(t, natsInboxPrefixes[target], cfg.NATS.InboxPrefix, "%s: nats.inbox_prefix", target)
	}
	for _, u := range natsUsers {
		var env []string
		for _, e := range composeEnv() {
			if !strings.HasPrefix(e, natsPasswordEnv(u)+"=") {
				env = append(env, e)
			}
		}
		_, err := loadComposeWith(env)
		assert.ErrorContains(t, err, natsPasswordEnv(u), "compose starts without %s", natsPasswordEnv(u))
	}
}

var (
	initHost = regexp.MustCompile(`host: "([^"]+)"`)
	initSet  = regexp.MustCompile(`rs\.initiate\(\{ _id: "([^"]+)"`)
)

// TestComposeMongoReplicaSet: three mongod members of one replica set, each with its data in a
// named volume; a one-shot service that initiates the set with exactly those members once all
// are healthy; jetbus's processes connect to the set by its name and members.
func TestComposeMongoReplicaSet(t *testing.T) {
	p := loadCompose(t)
	members := []string{"mongo1", "mongo2", "mongo3"}
	var setName string
	for _, m := range members {
		s := service(t, p, m)
		require.NotEmpty(t, s.Command)
		assert.Equal(t, "mongod", s.Command[0], "%s runs %q", m, s.Command)
		rs := flagValue(s.Command, "--replSet")
		require.NotEmpty(t, rs, "%s: no --replSet", m)
		if setName == "" {
			setName = rs
		}
		assert.Equal(t, setName, rs, "%s: another replica set", m)
		assert.Contains(t, s.Command, "--bind_ip_all", "%s listens on loopback only", m)
		namedVolumeAt(t, p, s, "/data/db")
		require.NotNil(t, s.HealthCheck, "%s: no health check", m)
	}

	init := service(t, p, "mongo-init")
	assert.Equal(t, "no", init.Restart, "mongo-init runs once")
	for _, m := range members {
		dep, ok := init.DependsOn[m]
		require.True(t, ok, "mongo-init does not wait for %s", m)
		assert.Equal(t, types.ServiceConditionHealthy, dep.Condition, "mongo-init waits for %s", m)
	}
	require.NotEmpty(t, init.Command)
	assert.Equal(t, "mongosh", init.Command[0])
	script := bindSource(t, init, flagValue(init.Command, "--file"))
	data, err := os.ReadFile(script)
	require.NoError(t, err)
	var hosts []string
	for _, m := range initHost.FindAllSubmatch(data, -1) {
		hosts = append(hosts, string(m[1]))
	}
	var want []string
	for _, m := range members {
		want = append(want, m+":27017")
	}
	assert.ElementsMatch(t, want, hosts, "members that %s initiates", script)
	m := initSet.FindSubmatch(data)
	require.NotNil(t, m, "%s: no rs.initiate", script)
	assert.Equal(t, setName, string(m[1]), "%s initiates another set", script)
	assert.Contains(t, want, flagValue(init.Command, "--host"), "mongo-init connects to a non-member")

	for target := range images {
		s := service(t, p, target)
		require.NotNil(t, s.Environment["JETBUS_MONGO_URI"], "%s: JETBUS_MONGO_URI", target)
		u, err := url.Parse(*s.Environment["JETBUS_MONGO_URI"])
		require.NoError(t, err)
		assert.ElementsMatch(t, want, strings.Split(u.Host, ","), "%s: JETBUS_MONGO_URI's hosts", target)
		assert.Equal(t, setName, u.Query().Get("replicaSet"), "%s: JETBUS_MONGO_URI's replicaSet", target)
	}
}

// composeContainer is what a jetbus service's container sees: the files bound under
// /etc/jetbus, its environment and its command (or the image's default).
func composeContainer(t *testing.T, s types.ServiceConfig) container {
	t.Helper()
	c := container{Files: map[string][]byte{}, Env: map[string]string{}, Args: s.Command}
	if len(c.Args) == 0 {
		c.Args = []string{"run", "--config", imageConfigPath}
	}
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || !strings.HasPrefix(v.Target, "/etc/jetbus/") {
			continue
		}
		st, err := os.Stat(v.Source)
		require.NoError(t, err, "%s: source of %s", s.Name, v.Target)
		if !st.IsDir() {
			data, err := os.ReadFile(v.Source)
			require.NoError(t, err)
			c.Files[v.Target] = data
			continue
		}
		for rel, data := range dirFiles(t, v.Source) {
			c.Files[filepath.Join(v.Target, rel)] = data
		}
	}
	for k, v := range s.Environment {
		require.NotNil(t, v, "%s: %s is taken from the host's environment", s.Name, k)
		c.Env[k] = *v
	}
	return c
}

// TestComposeJetbusServices: the bridge and the projectors run the Dockerfile's images on the
// deploy configuration as jetbus's loader reads it in their containers (mounted files,
// environment, command); their topics are R3 on the 3-node cluster; the health check asks
// /readyz on the configured port with the images' probe; they wait for NATS to be healthy and
// the replica set to be initiated; the stop grace period outlasts shutdown.timeout.
func TestComposeJetbusServices(t *testing.T) {
	p := loadCompose(t)
	d := parseDockerfile(t)
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)

	for target, image := range images {
		t.Run(target, func(t *testing.T) {
			s := service(t, p, target)
			assert.Equal(t, image, s.Image)
			require.NotNil(t, s.Build, "%s has no build", target)
			assert.Equal(t, root, s.Build.Context, "build context")
			assert.Equal(t, "deploy/Dockerfile", s.Build.Dockerfile)
			assert.Equal(t, target, s.Build.Target)
			assert.NotNil(t, d.stage(target), "the Dockerfile has no target %s", target)

			cfg, err := composeContainer(t, s).load(t)
			require.NoError(t, err, "jetbus refuses the configuration in the %s container", target)
			require.NotEmpty(t, cfg.Topics)
			for _, tc := range cfg.Topics {
				assert.Equal(t, len(natsNodes), tc.Replicas, "topic %s: replicas", tc.Name)
			}
			assert.Equal(t, len(natsNodes), cfg.DLQ.Replicas, "dlq.replicas")

			port, all := listenPort(t, cfg.HTTP.Addr)
			assert.True(t, all, "http.addr %s: unreachable from outside the container", cfg.HTTP.Addr)
			u := healthURL(t, s)
			assert.Equal(t, probePath, s.HealthCheck.Test[1], "the probe in the image")
			assert.Equal(t, "/readyz", u.Path)
			assert.Equal(t, strconv.Itoa(port), u.Port(), "health check port against http.addr %s", cfg.HTTP.Addr)
			assert.Contains(t, []string{"127.0.0.1", "localhost"}, u.Hostname())
			require.NotEmpty(t, s.Ports, "%s publishes no port", target)
			for _, pc := range s.Ports {
				assert.Equal(t, uint32(port), pc.Target, "published port")
			}

			require.NotNil(t, s.StopGracePeriod, "stop_grace_period (compose's default 10s is below shutdown.timeout)")
			assert.Greater(t, time.Duration(*s.StopGracePeriod), cfg.Shutdown.Timeout, "stop_grace_period against shutdown.timeout")
			assert.NotEmpty(t, s.Restart, "restart policy")

			for _, n := range natsNodes {
				assert.Equal(t, types.ServiceConditionHealthy, s.DependsOn[n].Condition, "waits for %s", n)
			}
			assert.Equal(t, types.ServiceConditionCompletedSuccessfully, s.DependsOn["mongo-init"].Condition, "waits for the replica set")
		})
	}
	bridge, projector := service(t, p, "bridge"), service(t, p, "projector")
	assert.Equal(t, 1, bridge.GetScale(), "bridge replicas")
	assert.Equal(t, 2, projector.GetScale(), "projector replicas")
	assert.Equal(t, types.ServiceConditionHealthy, projector.DependsOn["bridge"].Condition,
		"the projectors start after the bridge registered the schemas")
}
