package deploy

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/wiring"
)

// natsNodes are the compose setup's NATS servers, each with its configuration file.
var natsNodes = []string{"nats1", "nats2", "nats3"}

func natsConfigFile(node string) string { return filepath.Join("nats", node+".conf") }

// natsOptions reads a NATS configuration file as nats-server itself does, with the users'
// passwords in the environment (natsPasswords).
func natsOptions(t *testing.T, file string) *server.Options {
	t.Helper()
	natsPasswords(t)
	o, err := server.ProcessConfigFile(file)
	require.NoError(t, err, "nats-server refuses %s", file)
	return o
}

// TestNATSConfigs: each node's file, as nats-server reads it, names the node, enables
// JetStream, and routes to all three nodes of one cluster.
func TestNATSConfigs(t *testing.T) {
	var clusterName string
	for _, node := range natsNodes {
		t.Run(node, func(t *testing.T) {
			o := natsOptions(t, natsConfigFile(node))
			assert.Equal(t, node, o.ServerName, "server_name: JetStream needs unique names")
			assert.True(t, o.JetStream, "jetstream is off")
			assert.NotEmpty(t, o.StoreDir, "jetstream has no store_dir")
			assert.Equal(t, 4222, o.Port)
			assert.Equal(t, 8222, o.HTTPPort, "monitoring port (health checks)")
			assert.NotEmpty(t, o.Cluster.Name)
			if clusterName == "" {
				clusterName = o.Cluster.Name
			}
			assert.Equal(t, clusterName, o.Cluster.Name, "every node in one cluster")
			var routes []string
			for _, r := range o.Routes {
				routes = append(routes, r.Host)
			}
			var want []string
			for _, n := range natsNodes {
				want = append(want, net.JoinHostPort(n, strconv.Itoa(o.Cluster.Port)))
			}
			assert.ElementsMatch(t, want, routes, "routes")
		})
	}
}

// TestNATSClusterTakesR3Topics starts the three nodes in this process from their
// configuration files — only the addresses (loopback, free ports) and the store directories
// changed — and has jetbus ensure the deploy configuration's topics and DLQ on it, logged in
// as the bridge user, as the bridge does at start: every stream is created with three
// replicas, one on each node.
func TestNATSClusterTakesR3Topics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ports := map[string]int{}
	for _, n := range natsNodes {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[n] = l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
	}
	var (
		servers []*server.Server
		urls    []string
	)
	for _, node := range natsNodes {
		o := natsOptions(t, natsConfigFile(node))
		o.Host, o.Port, o.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", ports[node]
		for _, r := range o.Routes {
			require.Contains(t, ports, r.Hostname(), "route to %s", r)
			r.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[r.Hostname()]))
		}
		o.StoreDir = filepath.Join(t.TempDir(), node)
		o.NoLog, o.NoSigs = true, true
		s, err := embeddedtest.StartServer(o)
		require.NoError(t, err, node)
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		servers = append(servers, s)
		urls = append(urls, s.ClientURL())
	}
	// A JetStream request sent before the meta leader is elected goes unanswered.
	require.Eventually(t, func() bool {
		leaders := 0
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leaders++
			}
		}
		return leaders == 1
	}, 30*time.Second, 50*time.Millisecond, "the cluster elected no meta leader")

	cfg, err := config.Load(config.Options{File: deployConfig})
	require.NoError(t, err)
	cfg.NATS.URLs = urls
	cfg.NATS.User, cfg.NATS.Password, cfg.NATS.InboxPrefix = userBridge, natsPassword(userBridge), natsInboxPrefixes[userBridge]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tool, err := wiring.Open(ctx, cfg, "deploy test", wiring.Needs{DLQ: true}, embeddedtest.Logger(t))
	require.NoError(t, err)
	defer tool.Close()
	require.NoError(t, tool.EnsureTopics(ctx))
	bus := tool.Bus

	streams := []string{dlq.StreamName, dlq.RejectsStreamName}
	for _, tc := range cfg.Topics {
		streams = append(streams, jetbus.StreamName(tc.Name))
	}
	for _, name := range streams {
		require.Eventually(t, func() bool {
			st, err := bus.JetStream().Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := st.Info(ctx)
			if err != nil || info.Cluster == nil || info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current {
					return false
				}
			}
			return true
		}, 30*time.Second, 100*time.Millisecond, "stream %s: not 3 current replicas", name)
	}
}

// natsServerVersion is the nats-server version jetbus's tests embed (../go.mod).
func natsServerVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(data)
	require.NotNil(t, m, "../go.mod requires no nats-server")
	return string(m[1])
}

// TestNATSHelmValues: the values for NATS's Helm chart ask for a cluster of as many servers as
// the topics have replicas, with JetStream on persistent volumes, running the nats-server
// version jetbus's tests run against, requiring the users of nats/auth.conf (a copy in the
// chart's ConfigMap, included by the servers' configuration) with every password from the
// Secret the processes read theirs from. (The chart itself is not rendered here: see README.)
func TestNATSHelmValues(t *testing.T) {
	data, err := os.ReadFile("k8s/nats-values.yaml")
	require.NoError(t, err)
	var v struct {
		Config struct {
			Cluster struct {
				Enabled  bool `json:"enabled"`
				Replicas int  `json:"replicas"`
			} `json:"cluster"`
			JetStream struct {
				Enabled   bool `json:"enabled"`
				FileStore struct {
					PVC struct {
						Size string `json:"size"`
					} `json:"pvc"`
				} `json:"fileStore"`
			} `json:"jetstream"`
			Merge map[string]any `json:"merge"`
		} `json:"config"`
		ConfigMap struct {
			Merge struct {
				Data map[string]string `json:"data"`
			} `json:"merge"`
		} `json:"configMap"`
		Container struct {
			Image struct {
				Tag string `json:"tag"`
			} `json:"image"`
			Env map[string]struct {
				ValueFrom struct {
					SecretKeyRef struct {
						Name string `json:"name"`
						Key  string `json:"key"`
					} `json:"secretKeyRef"`
				} `json:"valueFrom"`
			} `json:"env"`
		} `json:"container"`
		PodTemplate struct {
			TopologySpreadConstraints map[string]map[string]any `json:"topologySpreadConstraints"`
		} `json:"podTemplate"`
	}
	require.NoError(t, yaml.UnmarshalStrict(data, &v), "keys outside those checked here")
	assert.True(t, v.Config.Cluster.Enabled)
	assert.True(t, v.Config.JetStream.Enabled)
	assert.NotEmpty(t, v.Config.JetStream.FileStore.PVC.Size)
	assert.Equal(t, v.Container.Image.Tag, natsServerVersion(t)+"-alpine")
	assert.Contains(t, v.PodTemplate.TopologySpreadConstraints, "kubernetes.io/hostname")

	// The chart writes a key ending in $include as an include directive, of a file of its
	// ConfigMap (the directory of nats.conf).
	auth, err := os.ReadFile(natsAuthFile)
	require.NoError(t, err)
	var included []string
	for k, val := range v.Config.Merge {
		if strings.HasSuffix(k, "$include") {
			included = append(included, fmt.Sprint(val))
		}
	}
	require.Equal(t, []string{"auth.conf"}, included, "config.merge includes auth.conf")
	assert.Equal(t, string(auth), v.ConfigMap.Merge.Data["auth.conf"], "configMap auth.conf is a copy of %s", natsAuthFile)
	for _, u := range natsUsers {
		e, ok := v.Container.Env[natsPasswordEnv(u)]
		require.True(t, ok, "container.env: %s, which auth.conf reads", natsPasswordEnv(u))
		assert.Equal(t, natsSecret, e.ValueFrom.SecretKeyRef.Name, "%s from the Secret", natsPasswordEnv(u))
		assert.Equal(t, natsSecretKey(u), e.ValueFrom.SecretKeyRef.Key, "%s's key", natsPasswordEnv(u))
	}
	assert.Len(t, v.Container.Env, len(natsUsers), "container.env: the passwords only")

	cfg, err := config.Load(config.Options{File: deployConfig})
	require.NoError(t, err)
	for _, tc := range cfg.Topics {
		assert.LessOrEqual(t, tc.Replicas, v.Config.Cluster.Replicas, "topic %s: more replicas than NATS servers", tc.Name)
	}
	assert.LessOrEqual(t, cfg.DLQ.Replicas, v.Config.Cluster.Replicas, "dlq: more replicas than NATS servers")
}

// natsURL is a client URL of a node.
func natsURL(host string, port int) string {
	return (&url.URL{Scheme: "nats", Host: net.JoinHostPort(host, fmt.Sprint(port))}).String()
}
