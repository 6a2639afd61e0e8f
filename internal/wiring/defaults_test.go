package wiring

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
	"github.com/jetbus/jetbus/snapshotapi"
)

// minimal declares one of each list element with only its required keys: everything else
// takes the config layer's defaults.
const minimal = `
mongo: {uri: "mongodb://127.0.0.1:27017/?replicaSet=rs0"}
topics: [{name: orders}]
ingress: {allow: [orders]}
changefeeds: [{name: cdc, collection: items, topic: orders}]
outbox: [{name: ob, collection: outbox}]
projections: [{name: orders-view, topic: orders, collection: orders}]
views: [{name: orders, projection: orders-view}]
`

// processDefaults are the defaults of keys no package owns: the processes' own settings.
var processDefaults = []string{"nats.urls", "http.addr", "log.level", "shutdown.timeout"}

// TestConfigDefaultsAreThePackagesDefaults loads a configuration that sets nothing it need not,
// maps every section as the processes do, and compares each key that has a default in the
// config layer with the default of the package that runs it. A default declared in the
// config layer and checked nowhere here fails the test too.
func TestConfigDefaultsAreThePackagesDefaults(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(minimal), 0o644))
	cfg, err := config.Load(config.Options{File: file})
	require.NoError(t, err)

	tc := topicConfig(cfg.Topics[0])
	ic := ingressConfig(cfg)
	fc := changefeedConfig(cfg, cfg.Changefeeds[0])
	oc := outboxConfig(cfg, cfg.Outbox[0])
	pc := projectionConfig(cfg, cfg.Projections[0])
	dc := dlqConfig(cfg.DLQ, false)
	ac, err := apiConfig(cfg, make([]byte, 32))
	require.NoError(t, err)
	view := ac.Views[0]
	tr := tracingConfig(cfg, "bridge")

	checks := map[string][2]any{ // key path: {mapped value, package default}
		"nats.inbox_prefix":             {cfg.NATS.InboxPrefix, strings.TrimSuffix(nats.InboxPrefix, ".")},
		"mongo.database":                {pc.Database, snapshotapi.DefaultDatabase},
		"http.request_timeout":          {ac.RequestTimeout, snapshotapi.DefaultRequestTimeout},
		"http.max_connections":          {cfg.HTTP.MaxConnections, process.DefaultMaxConnections},
		"http.max_requests":             {cfg.HTTP.MaxRequests, process.DefaultMaxRequests},
		"http.idle_timeout":             {cfg.HTTP.IdleTimeout, process.DefaultIdleTimeout},
		"http.max_waits":                {ac.MaxWaits, snapshotapi.DefaultMaxWaits},
		"http.max_watchers":             {ac.MaxWatchers, snapshotapi.DefaultMaxWatchers},
		"http.watch_buffer":             {ac.WatchBuffer, snapshotapi.DefaultWatchBuffer},
		"http.watch_window":             {ac.WatchWindow, snapshotapi.DefaultWatchWindow},
		"http.watch_window_bytes":       {ac.WatchWindowBytes, int64(snapshotapi.DefaultWatchWindowBytes)},
		"http.max_catchups":             {ac.MaxCatchUps, snapshotapi.DefaultMaxCatchUps},
		"topics.partitions":             {tc.Partitions, jetstream.DefaultPartitions},
		"topics.replicas":               {tc.Replicas, jetstream.DefaultReplicas},
		"topics.duplicate_window":       {tc.DuplicateWindow, jetstream.DefaultDuplicateWindow},
		"topics.storage":                {tc.Storage, jetstream.TopicConfig{}.Storage}, // file: the zero StorageType
		"dlq.replicas":                  {dc.Replicas, dlq.DefaultReplicas},
		"dlq.max_age":                   {dc.MaxAge, dlq.DefaultMaxAge},
		"dlq.max_bytes":                 {dc.MaxBytes, dlq.DefaultMaxBytes},
		"dlq.sweep_interval":            {cfg.DLQ.SweepInterval, dlq.DefaultSweepInterval},
		"dlq.rejects.max_age":           {dc.Rejects.MaxAge, dlq.DefaultRejectsMaxAge},
		"dlq.rejects.max_bytes":         {dc.Rejects.MaxBytes, dlq.DefaultRejectsMaxBytes},
		"dlq.rejects.max_body":          {dc.Rejects.MaxBody, dlq.DefaultRejectsMaxBody},
		"ingress.max_message_size":      {ic.MaxMessageSize, ingress.DefaultMaxMessageSize},
		"ingress.max_in_flight":         {ic.MaxInFlight, ingress.DefaultMaxInFlight},
		"ingress.max_pending":           {ic.PendingMsgs, ingress.DefaultPendingMsgs},
		"ingress.max_pending_bytes":     {ic.PendingBytes, ingress.DefaultPendingBytes},
		"ingress.ack_timeout":           {ic.AckTimeout, ingress.DefaultAckTimeout},
		"ingress.ts_window":             {ic.TSWindow, ingress.DefaultTSWindow},
		"ingress.reply_prefixes":        {ic.ReplyPrefixes, ingress.DefaultReplyPrefixes},
		"changefeeds.format":            {fc.Format, changefeed.DefaultFormat},
		"changefeeds.full_document":     {fc.FullDocument, changefeed.DefaultFullDocument},
		"changefeeds.start":             {fc.Start, changefeed.DefaultStart},
		"changefeeds.on_history_lost":   {fc.OnHistoryLost, changefeed.DefaultHistoryPolicy},
		"changefeeds.heartbeat":         {fc.Heartbeat, changefeed.DefaultHeartbeat},
		"changefeeds.max_in_flight":     {fc.MaxInFlight, changefeed.DefaultMaxInFlight},
		"outbox.after":                  {oc.After, changefeed.DefaultAfter},
		"outbox.retention":              {oc.Retention, changefeed.DefaultRetention},
		"projections.mode":              {pc.Mode, projection.DefaultMode},
		"projections.tombstones":        {pc.Tombstones, projection.DefaultTombstones},
		"projections.batch_size":        {pc.BatchSize, projection.DefaultBatchSize},
		"projections.linger":            {pc.Linger, projection.DefaultLinger},
		"projections.deleted_retention": {pc.DeletedRetention, projection.DefaultDeletedRetention},
		"projections.max_version_step":  {pc.MaxVersionStep, projection.DefaultMaxVersionStep},
		"views.max_limit":               {view.MaxLimit, snapshotapi.DefaultMaxLimit},
		"views.cache_control":           {view.CacheControl, snapshotapi.DefaultCacheControl},
		"auth.jwt.scope_claim":          {ac.JWT.ScopeClaim, snapshotapi.DefaultScopeClaim},
		"auth.ticket_ttl":               {ac.TicketTTL, snapshotapi.DefaultTicketTTL},
		"tracing.protocol":              {tr.Protocol, tracing.DefaultProtocol},
		"tracing.sampler_ratio":         {tr.SamplerRatio, tracing.DefaultSamplerRatio},
	}
	for key, c := range checks {
		assert.EqualValues(t, c[1], c[0], "%s: the config default differs from the package default", key)
	}

	// Every key with a default in the config layer is checked above, or is the process's own.
	for _, key := range defaultedKeys(reflect.TypeOf(config.Config{}), "") {
		if _, ok := checks[key]; !ok && !slices.Contains(processDefaults, key) {
			t.Errorf("%s has a config default that no package default is compared with: add it to this test", key)
		}
	}
}

// defaultedKeys lists the key paths (list elements without an index) whose field has a
// default tag.
func defaultedKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		if _, ok := f.Tag.Lookup("default"); ok {
			keys = append(keys, path)
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeOf(config.Config{}).PkgPath() {
			keys = append(keys, defaultedKeys(ft, path+".")...)
		}
	}
	return keys
}

// TestOutboxPublishesOnlyToDeclaredTopics: an outbox without topics may name every declared
// topic, and no other; one with topics, those.
func TestOutboxPublishesOnlyToDeclaredTopics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
mongo: {uri: "mongodb://127.0.0.1:27017/?replicaSet=rs0"}
topics: [{name: orders}, {name: refunds}]
outbox: [{name: all, collection: outbox}, {name: narrow, collection: outbox2, topics: [refunds]}]
`), 0o644))
	cfg, err := config.Load(config.Options{File: file})
	require.NoError(t, err)
	assert.Equal(t, []string{"orders", "refunds"}, outboxConfig(cfg, cfg.Outbox[0]).Topics)
	assert.Equal(t, []string{"refunds"}, outboxConfig(cfg, cfg.Outbox[1]).Topics)
}

// TestProjectionMaxVersionStep: max_version_step reaches the projection, and the largest
// version as the step is the package's UnboundedVersionStep.
func TestProjectionMaxVersionStep(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
mongo: {uri: "mongodb://127.0.0.1:27017/?replicaSet=rs0"}
topics: [{name: orders}]
projections:
  - {name: a, topic: orders, collection: a, version: /v, max_version_step: 1000}
  - {name: b, topic: orders, collection: b, version: /v, max_version_step: 9223372036854775807}
`), 0o644))
	cfg, err := config.Load(config.Options{File: file})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), projectionConfig(cfg, cfg.Projections[0]).MaxVersionStep)
	assert.Equal(t, projection.UnboundedVersionStep, projectionConfig(cfg, cfg.Projections[1]).MaxVersionStep)
}

// TestTracingConfig: the tracing section reaches the processes, each with its own service
// name unless one is set, and its baggage keys reach the Buses.
func TestTracingConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
tracing: {enabled: true, endpoint: "http://collector:4318", protocol: grpc, sampler_ratio: 0.5, baggage: [tenant]}
`), 0o644))
	cfg, err := config.Load(config.Options{File: file})
	require.NoError(t, err)
	assert.Equal(t, tracing.Config{Enabled: true, Endpoint: "http://collector:4318", Protocol: "grpc", SamplerRatio: 0.5, ServiceName: "jetbus-bridge"},
		tracingConfig(cfg, "bridge"))
	assert.Equal(t, "jetbus-projector", tracingConfig(cfg, "projector").ServiceName)
	for _, build := range []func(*config.Config) (process.Spec, error){Bridge, Projector} {
		spec, err := build(cfg)
		require.NoError(t, err)
		assert.Equal(t, "jetbus-"+spec.Name, spec.Tracing.ServiceName)
		assert.Equal(t, []string{"tenant"}, spec.BaggageKeys)
	}
	cfg.Tracing.ServiceName = "mine"
	assert.Equal(t, "mine", tracingConfig(cfg, "projector").ServiceName)
}
