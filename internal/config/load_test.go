package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/internal/config"
)

// base is a valid configuration the bad cases start from; its line numbers matter.
const base = `nats:
  urls: [nats://127.0.0.1:4222]
mongo:
  uri: mongodb://127.0.0.1:27017
topics:
  - name: orders
    partitions: 4
projections:
  - name: orders-view
    topic: orders
    collection: orders
    indexes:
      - fields: [status]
views:
  - name: orders
    projection: orders-view
    sort: [status]
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		env  []string
		want []string // each "LINE:COL: PATH: message" (the file's name is prefixed)
	}{
		{"unknown top-level key", base + "topcis: []\n",
			nil, []string{`18:1: topcis: unknown key "topcis" (did you mean "topics"?)`}},
		{"unknown nested key", strings.Replace(base, "    partitions: 4", "    partitons: 4", 1),
			nil, []string{`7:5: topics[0].partitons: unknown key "partitons" (did you mean "partitions"?)`}},
		{"wrong type: word for integer", strings.Replace(base, "partitions: 4", "partitions: four", 1),
			nil, []string{`7:5: topics[0].partitions: want an integer, got "four"`}},
		{"wrong type: list for mapping", "nats: [a]\n",
			nil, []string{`1:1: nats: want a mapping, got a list`}},
		{"inbox prefix with a wildcard", "nats:\n  inbox_prefix: _INBOX.>\n",
			nil, []string{`2:3: nats.inbox_prefix: "_INBOX.>" is not an inbox prefix`}},
		{"inbox prefix in JetStream's subjects", "nats:\n  inbox_prefix: $JS.x\n",
			nil, []string{`2:3: nats.inbox_prefix: "$JS.x" is not an inbox prefix`}},
		{"wrong type: mapping for list", base + "ingress:\n  allow: {orders: true}\n",
			nil, []string{`19:3: ingress.allow: want a list, got a mapping`}},
		{"out of range", strings.Replace(base, "partitions: 4", "partitions: 0", 1),
			nil, []string{`7:5: topics[0].partitions: must be at least 1, got 0`}},
		{"max_version_step 0 is no bound's spelling", strings.Replace(base, "    collection: orders\n", "    collection: orders\n    max_version_step: 0\n", 1),
			nil, []string{`12:5: projections[0].max_version_step: must be at least 1, got 0`}},
		{"max_version_step past int64", strings.Replace(base, "    collection: orders\n", "    collection: orders\n    max_version_step: 9223372036854775808\n", 1),
			nil, []string{`12:5: projections[0].max_version_step: want an integer, got "9223372036854775808"`}},
		{"bad enum", strings.Replace(base, "    collection: orders\n", "    collection: orders\n    mode: upsert\n", 1),
			nil, []string{`12:5: projections[0].mode: "upsert" is not one of replace, merge`}},
		{"bad topic name", strings.Replace(base, "name: orders\n    partitions", "name: Orders\n    partitions", 1),
			nil, []string{`6:5: topics[0].name: jetbus: invalid topic name: "Orders" must match`,
				`10:5: projections[0].topic: topic "orders" is not declared in topics (did you mean "Orders"?)`}},
		{"bad duration", base + "shutdown:\n  timeout: soon\n",
			nil, []string{`19:3: shutdown.timeout: want a duration such as 30s, 5m, 24h or 7d, got "soon"`}},
		{"view names an undeclared projection", strings.Replace(base, "projection: orders-view", "projection: order-view", 1),
			nil, []string{`16:5: views[0].projection: projection "order-view" is not declared in projections (did you mean "orders-view"?)`}},
		{"projection names an undeclared topic", strings.Replace(base, "    topic: orders", "    topic: payments", 1),
			nil, []string{`10:5: projections[0].topic: topic "payments" is not declared in topics (declared: orders)`}},
		{"ingress allows an undeclared topic", base + "ingress:\n  allow: [orders, refunds]\n",
			nil, []string{`19:19: ingress.allow[1]: topic "refunds" is not declared in topics (declared: orders)`}},
		{"changefeed names an undeclared topic", base + "changefeeds:\n  - name: cdc\n    topic: customers\n",
			nil, []string{`20:5: changefeeds[0].topic: topic "customers" is not declared in topics (declared: orders)`}},
		{"changefeed {database} without deployment", base + "changefeeds:\n  - name: cdc\n    topic: \"{database}.{collection}\"\n",
			nil, []string{`20:5: changefeeds[0].topic: {database} needs a feed of the deployment (deployment: true)`}},
		{"changefeed of the deployment with a database", base + "changefeeds:\n  - name: cdc\n    deployment: true\n    database: shop\n    topic: \"{database}.{collection}\"\n",
			nil, []string{`20:5: changefeeds[0].deployment: a feed of the deployment names no database or collection`}},
		{"duplicate topic", strings.Replace(base, "projections:", "  - name: orders\nprojections:", 1),
			nil, []string{`8:5: topics[1].name: "orders" is declared twice (also topics[0])`}},
		{"duplicate key", strings.Replace(base, "    partitions: 4\n", "    partitions: 4\n    partitions: 8\n", 1),
			nil, []string{`8:5: topics[0].partitions: duplicate key "partitions"`}},
		{"required key missing", strings.Replace(base, "    collection: orders\n", "", 1),
			nil, []string{`9:5: projections[0].collection: required`}},
		{"sort without an index", strings.Replace(base, "sort: [status]", "sort: [total]", 1),
			nil, []string{`17:12: views[0].sort[0]: no index of projection "orders-view" leads with "total"`}},
		{"filter without an index", strings.Replace(base, "sort: [status]", "sort: [status]\n    filters: {status: string, total: number}", 1),
			nil, []string{`18:31: views[0].filters.total: no index of projection "orders-view" leads with "total", so each such request would scan the collection`}},
		{"short token", base + "auth:\n  tokens:\n    - token: short-token\n      views: [orders]\n",
			nil, []string{`20:7: auth.tokens[0].token: a token has at least 16 characters (this one 11)`}},
		{"short HS256 secret", base + "auth:\n  jwt:\n    hs256_secret: not-32-bytes\n",
			nil, []string{`20:5: auth.jwt.hs256_secret: an HS256 secret has at least 32 bytes`}},
		{"a view named ops", strings.Replace(base, "  - name: orders\n    projection", "  - name: ops\n    projection", 1),
			nil, []string{`15:5: views[0].name: "ops" is the operations endpoints' scope`}},
		{"listening everywhere without auth", base + "http:\n  addr: \":8080\"\n",
			nil, []string{`19:3: http.addr: :8080 listens beyond loopback without auth`}},
		{"mongo needed", strings.Replace(base, "mongo:\n  uri: mongodb://127.0.0.1:27017\n", "", 1),
			nil, []string{`6:1: projections: need mongo.uri (MongoDB), which is not set`}},
		{"unset variable", base + "auth:\n  tokens:\n    - token: ${DASH_TOKEN}\n      views: [orders]\n",
			nil, []string{`20:14: auth.tokens[0].token: environment variable DASH_TOKEN is not set`}},
		{"token scope names an undeclared view", base + "auth:\n  tokens:\n    - token: ${T:abcdefghijklmnop}\n      views: [orderz]\n",
			nil, []string{`21:15: auth.tokens[0].views[0]: view "orderz" is not declared in views (did you mean "orders"?)`}},
		{"database name with NUL", strings.Replace(base, "  uri: mongodb://127.0.0.1:27017\n", "  uri: mongodb://127.0.0.1:27017\n  database: \"sh\\0op\"\n", 1),
			nil, []string{`5:3: mongo.database: "sh\x00op" is not a MongoDB database name`}},
		{"collection of MongoDB's", strings.Replace(base, "collection: orders", "collection: system.views", 1),
			nil, []string{`11:5: projections[0].collection: "system.views" is not a collection jetbus may use`}},
		{"YAML syntax", "nats:\n  urls: []\n\ttopics: []\n",
			nil, []string{`3:1: YAML: found character that cannot start any token`}},
		{"not a mapping", "- a\n- b\n",
			nil, []string{`1:1: the file must be a mapping of sections`}},
		{"several errors at once", strings.Replace(strings.Replace(base, "partitions: 4", "partitions: -1", 1), "projection: orders-view", "projection: nope", 1) + "bogus: 1\n",
			nil, []string{`7:5: topics[0].partitions: must be at least 1`, `16:5: views[0].projection: projection "nope"`, `18:1: bogus: unknown key`}},
		{"tracing: sampler ratio above 1", base + "tracing:\n  sampler_ratio: 1.5\n",
			nil, []string{`19:3: tracing.sampler_ratio: must be at most 1, got 1.5`}},
		{"tracing: sampler ratio below 0", base + "tracing:\n  sampler_ratio: -0.1\n",
			nil, []string{`19:3: tracing.sampler_ratio: must be at least 0, got -0.1`}},
		{"tracing: endpoint without a scheme", base + "tracing:\n  endpoint: otel:4317\n",
			nil, []string{`19:3: tracing.endpoint: "otel:4317" is not a URL such as http://otel-collector:4318`}},
		{"tracing: unknown protocol", base + "tracing:\n  protocol: http/json\n",
			nil, []string{`19:3: tracing.protocol: "http/json" is not one of http, grpc`}},
		{"tracing: a baggage key that is no token", base + "tracing:\n  baggage: [tenant, \"user id\"]\n",
			nil, []string{`19:21: tracing.baggage[1]: "user id" is not a baggage key`}},
		{"tracing: not a number", base, []string{"JETBUS_TRACING_SAMPLER_RATIO=half"},
			[]string{`env JETBUS_TRACING_SAMPLER_RATIO: tracing.sampler_ratio: want a number, got "half"`}},
		{"bad environment value", base,
			[]string{"JETBUS_HTTP_ADDR=nowhere"}, []string{`env JETBUS_HTTP_ADDR: http.addr: "nowhere" is not host:port`}},
		{"unknown environment variable of a section", base,
			[]string{"JETBUS_NATS_URL=nats://x:4222", "JETBUS_TEST_MONGO_URI=ignored"}, []string{`env JETBUS_NATS_URL: unknown variable (did you mean JETBUS_NATS_URLS?)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := write(t, tc.yaml)
			_, err := config.Load(config.Options{File: file, Environ: tc.env})
			require.Error(t, err)
			var errs config.Errors
			require.True(t, errors.As(err, &errs), "want config.Errors, got %T: %v", err, err)
			require.Len(t, errs, len(tc.want), "%v", err)
			for i, w := range tc.want {
				got := errs[i].Error()
				if !strings.HasPrefix(w, "env ") && !strings.HasPrefix(w, "flag ") {
					assert.True(t, strings.HasPrefix(got, file), "error %q does not name the file", got)
					got = strings.TrimPrefix(got, file)
					w = ":" + strings.TrimPrefix(w, ":")
				}
				assert.Contains(t, got, w)
			}
		})
	}
}

func TestNATSAuthExclusive(t *testing.T) {
	file := write(t, "nats:\n  token: t\n  user: u\n  password: p\n")
	_, err := config.Load(config.Options{File: file})
	require.Error(t, err)
	assert.Equal(t, file+":2:3: nats.token: set one of creds, nkey, user/password and token; found user and token", err.Error())
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	_, err := config.Load(config.Options{Flags: []config.Override{{Path: "nats.urls", Value: []string{"http://x"}, Flag: "--nats-url"}}})
	require.Error(t, err)
	assert.Equal(t, `flag --nats-url: nats.urls[0]: "http://x": scheme must be nats, tls, ws or wss`, err.Error())
}

func TestSourcesOverride(t *testing.T) {
	file := write(t, base+"http:\n  addr: 127.0.0.1:1\nlog:\n  level: debug\nnats:\n  tls:\n    ca: certs/ca.pem\n")
	_, err := config.Load(config.Options{File: file})
	require.Error(t, err, "nats twice") // a duplicate section is refused

	file = write(t, base+"http:\n  addr: 127.0.0.1:1\nlog:\n  level: debug\nschemas: ../../examples/schemas\n")
	c, err := config.Load(config.Options{
		File:    file,
		Environ: []string{"JETBUS_HTTP_ADDR=127.0.0.1:2", "JETBUS_NATS_URLS=nats://a:1,nats://b:2", "JETBUS_NATS_TLS_CA=ca.pem"},
		Flags:   []config.Override{{Path: "http.addr", Value: "127.0.0.1:3", Flag: "--http-addr"}},
	})
	require.Error(t, err, "the schemas dir is relative to the file's directory, not the working one")

	abs, _ := filepath.Abs("../../examples/schemas")
	file = write(t, base+"http:\n  addr: 127.0.0.1:1\nlog:\n  level: debug\nschemas: "+abs+"\n")
	c, err = config.Load(config.Options{
		File:    file,
		Environ: []string{"JETBUS_HTTP_ADDR=127.0.0.1:2", "JETBUS_NATS_URLS=nats://a:1,nats://b:2", "JETBUS_NATS_TLS_CA=ca.pem"},
		Flags:   []config.Override{{Path: "http.addr", Value: "127.0.0.1:3", Flag: "--http-addr"}},
	})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:3", c.HTTP.Addr, "a flag overrides the environment and the file")
	assert.Equal(t, []string{"nats://a:1", "nats://b:2"}, c.NATS.URLs, "the environment overrides the file")
	assert.Equal(t, "ca.pem", c.NATS.TLS.CA, "a path from the environment stays relative to the working directory")
	assert.Equal(t, "debug", c.Log.Level)
	assert.Equal(t, 30*time.Second, c.Shutdown.Timeout, "default")
	assert.Equal(t, 1, c.Topics[0].Replicas, "default inside a list element")
	assert.Equal(t, "replace", c.Projections[0].Mode)
}

func TestDefaultsWithoutFile(t *testing.T) {
	c, err := config.Load(config.Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"nats://127.0.0.1:4222"}, c.NATS.URLs)
	assert.Equal(t, "127.0.0.1:8080", c.HTTP.Addr)
	assert.Equal(t, "jetbus", c.Mongo.Database)
	assert.Equal(t, config.ByteSize(1<<20), c.Ingress.MaxMessageSize)
}

func TestExampleConfig(t *testing.T) {
	c, err := config.Load(config.Options{File: "../../examples/jetbus.yaml"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("..", "..", "examples", "schemas"), c.Schemas, "relative to the file")
	require.Len(t, c.Changefeeds, 1)
	assert.Equal(t, map[string]any{"$match": map[string]any{"operationType": map[string]any{"$in": []any{"insert", "update", "replace", "delete"}}}},
		c.Changefeeds[0].Pipeline[0])
	assert.Equal(t, config.ByteSize(64<<10), c.Ingress.MaxMessageSize)
}

func TestSchemaProblemsAreConfigErrors(t *testing.T) {
	file := write(t, "schemas: schemas\n")
	require.NoError(t, os.MkdirAll(filepath.Join(filepath.Dir(file), "schemas", "orders"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(file), "schemas", "orders", "v1.json"), []byte("{nope"), 0o644))
	_, err := config.Load(config.Options{File: file})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join("schemas", "orders", "v1.json")+": ")
}

func TestTracingSection(t *testing.T) {
	c, err := config.Load(config.Options{})
	require.NoError(t, err)
	assert.Equal(t, config.Tracing{Protocol: "http", SamplerRatio: 1}, c.Tracing, "off by default")

	file := write(t, base+"tracing:\n  enabled: true\n  endpoint: https://collector.example.com:4318/otlp\n  protocol: grpc\n  sampler_ratio: 0.25\n  service_name: bridge-eu\n  baggage: [tenant, user.id]\n")
	c, err = config.Load(config.Options{File: file, Environ: []string{"JETBUS_TRACING_SAMPLER_RATIO=0"}})
	require.NoError(t, err)
	assert.Equal(t, config.Tracing{Enabled: true, Endpoint: "https://collector.example.com:4318/otlp", Protocol: "grpc",
		SamplerRatio: 0, ServiceName: "bridge-eu", Baggage: []string{"tenant", "user.id"}}, c.Tracing)

	c, err = config.Load(config.Options{Environ: []string{"JETBUS_TRACING_ENABLED=true", "JETBUS_TRACING_BAGGAGE=a,b"}})
	require.NoError(t, err)
	assert.True(t, c.Tracing.Enabled)
	assert.Equal(t, []string{"a", "b"}, c.Tracing.Baggage)
}
