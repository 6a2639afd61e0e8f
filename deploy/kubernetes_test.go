package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/jetbus/jetbus/internal/config"
)

const k8sBase = "k8s/base"

// kinds are the API types the base may hold; anything else is an error. No Secret: the
// operator creates the credentials (README.md); none is kept here.
var kinds = map[string]func() any{
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// decodeStrict decodes every YAML document of data into its Kubernetes API type; an unknown
// field, a wrong type or an unknown kind is an error.
func decodeStrict(data []byte) ([]any, error) {
	var objs []any
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("unexpected kind %s %s", tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		objs = append(objs, obj)
	}
}

// manifests are the objects of the base as kustomize renders it.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

// render builds the base with kustomize's library (as `kubectl kustomize` does, offline) and
// decodes the output strictly.
func render(t *testing.T) *manifests {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), k8sBase)
	require.NoError(t, err, "kustomize build %s", k8sBase)
	out, err := rm.AsYaml()
	require.NoError(t, err)
	objs, err := decodeStrict(out)
	require.NoError(t, err, "rendered base:\n%s", out)
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			m.deployments[o.Name] = o
		case *corev1.Service:
			m.services[o.Name] = o
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			m.pdbs[o.Name] = o
		}
	}
	return m
}

// TestKubernetesFilesDecodeStrictly: kustomization.yaml decodes into kustomize's own type
// and every resource file it lists into the Kubernetes API types, with unknown fields as
// errors; kustomize renders the base offline, and its output decodes the same way.
func TestKubernetesFilesDecodeStrictly(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(k8sBase, "kustomization.yaml"))
	require.NoError(t, err)
	var k kusttypes.Kustomization
	require.NoError(t, yaml.UnmarshalStrict(data, &k), "kustomization.yaml")
	require.NotEmpty(t, k.Resources)

	var listed []string
	for _, r := range k.Resources {
		listed = append(listed, r)
		data, err := os.ReadFile(filepath.Join(k8sBase, r))
		require.NoError(t, err)
		objs, err := decodeStrict(data)
		require.NoError(t, err, r)
		assert.NotEmpty(t, objs, "%s holds no object", r)
	}
	// A manifest that is not listed would be silently left out.
	files, err := filepath.Glob(filepath.Join(k8sBase, "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && b != "jetbus.yaml" {
			assert.Contains(t, listed, b, "%s is not in kustomization.yaml's resources", f)
		}
	}

	m := render(t)
	assert.ElementsMatch(t, []string{"jetbus-bridge", "jetbus-projector"}, keys(m.deployments))
	assert.ElementsMatch(t, []string{"jetbus-projector"}, keys(m.services))
	assert.ElementsMatch(t, []string{"jetbus-bridge", "jetbus-projector"}, keys(m.pdbs))
	require.Len(t, m.configMaps, 1)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// deploymentOf returns the rendered Deployment that runs target, and its container.
func deploymentOf(t *testing.T, m *manifests, target string) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d, ok := m.deployments["jetbus-"+target]
	require.True(t, ok, "no Deployment jetbus-%s", target)
	spec := &d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1, "%s: containers", d.Name)
	c := &spec.Containers[0]
	assert.Equal(t, target, c.Name)
	return d, c
}

// secretEnv are the environment variables of configuration keys marked secret in
// internal/config (secret:"true"): their values must come from Secrets, never from the
// manifests.
func secretEnv() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				continue
			}
			name := prefix + "_" + strings.ToUpper(key)
			switch {
			case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]():
				walk(f.Type, name)
			case f.Tag.Get("secret") == "true":
				out = append(out, name)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), strings.TrimSuffix(config.EnvPrefix, "_"))
	return out
}

// placeholders stand for Secrets' values when the configuration is loaded here.
var placeholders = map[string]string{
	"JETBUS_MONGO_URI": "mongodb://mongo-0.mongo,mongo-1.mongo,mongo-2.mongo/?replicaSet=rs0",
	// As a Secret made with openssl rand -hex 32 would hold.
	"JETBUS_AUTH_JWT_HS256_SECRET": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
}

// k8sContainer is what c sees in a pod of d: the ConfigMap's and Secrets' files where they are
// mounted (Secrets' as placeholders), its environment (Secrets' values as placeholders) and its
// arguments.
func k8sContainer(t *testing.T, m *manifests, d *appsv1.Deployment, c *corev1.Container) container {
	t.Helper()
	out := container{Files: map[string][]byte{}, Env: map[string]string{}, Args: c.Args}
	volumes := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		require.True(t, ok, "%s mounts an undeclared volume %s", c.Name, vm.Name)
		switch {
		case v.ConfigMap != nil:
			cm, ok := m.configMaps[v.ConfigMap.Name]
			require.True(t, ok, "volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
			require.NotEmpty(t, v.ConfigMap.Items, "volume %s: map the keys to paths", v.Name)
			for _, it := range v.ConfigMap.Items {
				data, ok := cm.Data[it.Key]
				require.True(t, ok, "volume %s: ConfigMap %s has no key %s", v.Name, cm.Name, it.Key)
				out.Files[path.Join(vm.MountPath, it.Path)] = []byte(data)
			}
			assert.Len(t, v.ConfigMap.Items, len(cm.Data), "volume %s: ConfigMap keys that are not mounted", v.Name)
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				out.Files[path.Join(vm.MountPath, it.Path)] = []byte("secret " + v.Secret.SecretName + "/" + it.Key)
			}
		default:
			t.Fatalf("volume %s: unexpected source", v.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v, ok := placeholders[e.Name]
			if !ok {
				v = "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
			out.Env[e.Name] = v
		case e.ValueFrom != nil:
			t.Fatalf("%s: %s from an unexpected source", c.Name, e.Name)
		default:
			out.Env[e.Name] = e.Value
		}
	}
	return out
}

// TestKubernetesDeployments: each process runs the Dockerfile's image as its non-root user,
// locked down; jetbus's loader accepts the configuration as the container sees it (the
// ConfigMap's files, the environment, the arguments); the probes ask /readyz and /healthz on
// the port http.addr listens on; the grace period outlasts shutdown.timeout; credentials are
// Secret references only; resources are bounded.
func TestKubernetesDeployments(t *testing.T) {
	m := render(t)
	d := parseDockerfile(t)
	required := map[string][]string{
		"bridge":    {"jetbus-nats", "jetbus-mongo", "jetbus-jwt"},
		"projector": {"jetbus-nats", "jetbus-mongo", "jetbus-jwt"},
	}
	for target, image := range images {
		t.Run(target, func(t *testing.T) {
			dep, c := deploymentOf(t, m, target)
			spec := dep.Spec.Template.Spec
			repo, _, _ := strings.Cut(c.Image, ":")
			assert.Equal(t, image, repo, "image")

			// Selection: the Deployment owns exactly its pods.
			sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
			require.NoError(t, err)
			assert.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "the selector misses the pod template")
			for name, other := range m.deployments {
				if name != dep.Name {
					assert.False(t, sel.Matches(labels.Set(other.Spec.Template.Labels)), "the selector also takes %s's pods", name)
				}
			}

			// Security: the image's non-root user, no privilege, read-only root, no token.
			psc, csc := spec.SecurityContext, c.SecurityContext
			require.NotNil(t, psc, "pod securityContext")
			require.NotNil(t, csc, "container securityContext")
			assert.Equal(t, ptr(true), psc.RunAsNonRoot, "runAsNonRoot")
			require.NotNil(t, psc.RunAsUser, "runAsUser")
			imageUser, _, _ := strings.Cut(d.user(t, target), ":")
			assert.Equal(t, imageUser, fmt.Sprint(*psc.RunAsUser), "runAsUser against the Dockerfile's USER")
			assert.True(t, nonRootUser(fmt.Sprint(*psc.RunAsUser)))
			require.NotNil(t, psc.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
			assert.Equal(t, ptr(false), csc.AllowPrivilegeEscalation)
			assert.Equal(t, ptr(true), csc.ReadOnlyRootFilesystem)
			require.NotNil(t, csc.Capabilities)
			assert.Equal(t, []corev1.Capability{"ALL"}, csc.Capabilities.Drop)
			assert.Equal(t, ptr(false), spec.AutomountServiceAccountToken)
			// A Service named e.g. jetbus-mongo would inject JETBUS_MONGO_PORT, an unknown
			// variable of the mongo section, and the process would refuse to start.
			assert.Equal(t, ptr(false), spec.EnableServiceLinks, "enableServiceLinks")

			// The configuration, as the container sees it.
			cfg, err := k8sContainer(t, m, dep, c).load(t)
			require.NoError(t, err, "jetbus refuses the configuration in the %s container", target)
			for _, tc := range cfg.Topics {
				assert.Equal(t, 3, tc.Replicas, "topic %s: replicas", tc.Name)
			}
			cm := m.configMaps[spec.Volumes[0].ConfigMap.Name]
			deployed, err := os.ReadFile(deployConfig)
			require.NoError(t, err)
			assert.Equal(t, string(deployed), cm.Data["jetbus.yaml"], "the ConfigMap holds %s", deployConfig)
			assert.Equal(t, "jetbus-config", strings.TrimRight(strings.TrimRight(cm.Name, "abcdefghijklmnopqrstuvwxyz0123456789"), "-"),
				"the ConfigMap's name: jetbus-config and kustomize's content hash")

			// Probes on the port the server listens on.
			port, all := listenPort(t, cfg.HTTP.Addr)
			assert.True(t, all, "http.addr %s: the kubelet probes the pod's IP", cfg.HTTP.Addr)
			require.Len(t, c.Ports, 1)
			assert.Equal(t, int32(port), c.Ports[0].ContainerPort, "containerPort against http.addr")
			for name, p := range map[string]struct {
				probe *corev1.Probe
				path  string
			}{"readiness": {c.ReadinessProbe, "/readyz"}, "liveness": {c.LivenessProbe, "/healthz"}} {
				require.NotNil(t, p.probe, "%s probe", name)
				require.NotNil(t, p.probe.HTTPGet, "%s probe: not HTTP", name)
				assert.Equal(t, p.path, p.probe.HTTPGet.Path, "%s probe path", name)
				assert.Equal(t, port, containerPort(t, c, p.probe.HTTPGet.Port), "%s probe port", name)
			}

			// Shutdown: the kubelet's SIGKILL comes after the drain's deadline.
			require.NotNil(t, spec.TerminationGracePeriodSeconds)
			assert.Greater(t, *spec.TerminationGracePeriodSeconds, seconds(cfg.Shutdown.Timeout),
				"terminationGracePeriodSeconds against shutdown.timeout %s", cfg.Shutdown.Timeout)

			// Credentials: Secret references, never values.
			var secrets []string
			for _, e := range c.Env {
				if slices.Contains(secretEnv(), e.Name) {
					assert.Empty(t, e.Value, "%s has a value in the manifest", e.Name)
					require.NotNil(t, e.ValueFrom, "%s: not from a Secret", e.Name)
					require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s: not from a Secret", e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					assert.Nil(t, e.ValueFrom.SecretKeyRef.Optional, "%s: an optional credential", e.Name)
					secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
				}
			}
			assert.ElementsMatch(t, required[target], secrets, "Secrets referenced")
			// NATS: the process's user (deploy/nats/auth.conf), with the password the NATS
			// servers read from the same Secret key (k8s/nats-values.yaml), on its inbox prefix.
			assert.Equal(t, target, cfg.NATS.User, "nats.user")
			assert.Equal(t, "secret "+natsSecret+"/"+natsSecretKey(target), cfg.NATS.Password, "nats.password")
			assert.Equal(t, natsInboxPrefixes[target], cfg.NATS.InboxPrefix, "nats.inbox_prefix")
			assert.Empty(t, cfg.NATS.Creds, "nats.creds: the users of deploy/nats/auth.conf log in with passwords")

			// Resources: requested and bounded.
			r := c.Resources
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, ok := r.Requests[res]
				require.True(t, ok, "no %s request", res)
				lim, ok := r.Limits[res]
				require.True(t, ok, "no %s limit", res)
				assert.LessOrEqual(t, req.Cmp(lim), 0, "%s request above its limit", res)
			}
		})
	}
}

// containerPort resolves a probe's or a Service's port (a number, or a container port's name).
func containerPort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("%s has no port named %s", c.Name, p.StrVal)
	return 0
}

func ptr[T any](v T) *T { return &v }

// TestKubernetesDisruptionBudgets: each Deployment has one PodDisruptionBudget over exactly its
// pods that lets a drain proceed (at least one pod may go) while keeping at least one.
func TestKubernetesDisruptionBudgets(t *testing.T) {
	m := render(t)
	for target := range images {
		t.Run(target, func(t *testing.T) {
			dep, _ := deploymentOf(t, m, target)
			var budgets []*policyv1.PodDisruptionBudget
			for _, p := range m.pdbs {
				sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
				require.NoError(t, err)
				if sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
					budgets = append(budgets, p)
				}
			}
			require.Len(t, budgets, 1, "PodDisruptionBudgets over %s's pods", dep.Name)
			p := budgets[0]
			require.NotNil(t, dep.Spec.Replicas)
			replicas := int(*dep.Spec.Replicas)
			assert.GreaterOrEqual(t, replicas, 2, "one replica: any disruption stops %s", target)
			require.NotNil(t, p.Spec.MaxUnavailable, "%s: maxUnavailable", p.Name)
			maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, replicas, true)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, maxUnavailable, 1, "%s blocks every drain", p.Name)
			assert.Less(t, maxUnavailable, replicas, "%s lets every pod go", p.Name)
		})
	}
}

// TestKubernetesProjectorService: the Service reaches only the projectors, on their HTTP
// port.
func TestKubernetesProjectorService(t *testing.T) {
	m := render(t)
	s, ok := m.services["jetbus-projector"]
	require.True(t, ok)
	projector, c := deploymentOf(t, m, "projector")
	bridge, _ := deploymentOf(t, m, "bridge")
	sel := labels.SelectorFromSet(s.Spec.Selector)
	assert.True(t, sel.Matches(labels.Set(projector.Spec.Template.Labels)), "the Service misses the projectors")
	assert.False(t, sel.Matches(labels.Set(bridge.Spec.Template.Labels)), "the Service also reaches the bridges")
	require.Len(t, s.Spec.Ports, 1)
	assert.Equal(t, int(c.Ports[0].ContainerPort), containerPort(t, c, s.Spec.Ports[0].TargetPort), "targetPort")
	assert.Equal(t, "http", s.Spec.Ports[0].Name)
}
