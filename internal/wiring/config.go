package wiring

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/tracing"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
	"github.com/jetbus/jetbus/snapshotapi"
)

// This file maps each section of the configuration to the Config of the package that runs
// it: the only place where a YAML key becomes a package's field. A zero in the YAML section
// stays zero where the package fills in its own default (the defaults test proves that the
// config layer's defaults and the packages' Default* constants agree).

// database is the rule "a component's database defaults to mongo.database".
func database(cfg *config.Config, db string) string { return cfg.DatabaseOf(db) }

// tracingConfig maps the tracing section for the process named process ("bridge",
// "projector"): its service name defaults to jetbus-<process>.
func tracingConfig(cfg *config.Config, process string) tracing.Config {
	t := cfg.Tracing
	name := t.ServiceName
	if name == "" {
		name = "jetbus-" + process
	}
	return tracing.Config{Enabled: t.Enabled, Endpoint: t.Endpoint, Protocol: t.Protocol, SamplerRatio: t.SamplerRatio, ServiceName: name}
}

// topicConfig maps a declared topic to the Bus's TopicConfig.
func topicConfig(t config.Topic) jetstream.TopicConfig {
	storage := natsjs.FileStorage
	if t.Storage == "memory" {
		storage = natsjs.MemoryStorage
	}
	return jetstream.TopicConfig{
		Name: t.Name, Partitions: t.Partitions, Replicas: t.Replicas, MaxAge: t.MaxAge,
		MaxBytes: int64(t.MaxBytes), Storage: storage, DuplicateWindow: t.DuplicateWindow,
		Keyed: t.Keyed, KeepPerKey: t.KeepPerKey,
	}
}

// dlqConfig maps the dlq section to the Queue's Config. attach is set by the tools and the
// projector: the DLQ's settings are the bridge's to apply (dlq.Config.Attach).
func dlqConfig(c config.DLQ, attach bool) dlq.Config {
	return dlq.Config{Replicas: c.Replicas, MaxAge: c.MaxAge, MaxBytes: int64(c.MaxBytes), Parking: c.Parking, Attach: attach,
		Rejects: dlq.RejectsConfig{MaxAge: c.Rejects.MaxAge, MaxBytes: int64(c.Rejects.MaxBytes), MaxBody: int(c.Rejects.MaxBody)}}
}

// changefeedConfig maps a declared changefeed. A deployment feed watches every database, so
// it gets no default one.
func changefeedConfig(cfg *config.Config, f config.Changefeed) changefeed.Config {
	db := f.Database
	if !f.Deployment {
		db = database(cfg, db)
	}
	pipeline := make(mongo.Pipeline, 0, len(f.Pipeline))
	for _, st := range f.Pipeline {
		// One key per stage (config check); keys sorted only to be deterministic.
		keys := make([]string, 0, len(st))
		for k := range st {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		d := bson.D{}
		for _, k := range keys {
			d = append(d, bson.E{Key: k, Value: st[k]})
		}
		pipeline = append(pipeline, d)
	}
	return changefeed.Config{
		Name: f.Name, Database: db, Collection: f.Collection, Pipeline: pipeline, Topic: f.Topic,
		Format: changefeed.Format(f.Format), FullDocument: changefeed.FullDocument(f.FullDocument),
		Start: changefeed.Start(f.Start), StartAt: f.StartAt, OnHistoryLost: changefeed.HistoryPolicy(f.OnHistoryLost),
		Heartbeat: f.Heartbeat, MaxInFlight: f.MaxInFlight,
	}
}

// outboxConfig maps a declared outbox. Its documents may name the topics it lists, or every
// declared topic: never one the configuration does not declare.
func outboxConfig(cfg *config.Config, o config.Outbox) changefeed.OutboxConfig {
	topics := o.Topics
	if len(topics) == 0 {
		for _, t := range cfg.Topics {
			topics = append(topics, t.Name)
		}
	}
	return changefeed.OutboxConfig{Name: o.Name, Database: database(cfg, o.Database), Collection: o.Collection,
		After: o.After, Retention: o.Retention, Topics: topics}
}

// ingressConfig maps the ingress section. Ingress drains in half the shutdown time, leaving
// the rest to the components that stop after it.
func ingressConfig(cfg *config.Config) ingress.Config {
	ic := cfg.Ingress
	return ingress.Config{
		Allow:          ic.Allow,
		MaxMessageSize: int(ic.MaxMessageSize),
		MaxInFlight:    ic.MaxInFlight,
		PendingMsgs:    ic.MaxPending,
		PendingBytes:   int(min(ic.MaxPendingSize, 1<<31-1)),
		AckTimeout:     ic.AckTimeout,
		DrainTimeout:   max(cfg.Shutdown.Timeout/2, time.Millisecond),
		ReplyPrefixes:  ic.ReplyPrefixes,
		TSWindow:       ic.TSWindow,
	}
}

// projectionConfig maps a declared projection; its partition buckets get the topic's replicas.
func projectionConfig(cfg *config.Config, p config.Projection) projection.Config {
	pc := projection.Config{
		Name: p.Name, Topic: p.Topic, Database: database(cfg, p.Database), Collection: p.Collection,
		Mode: projection.Mode(p.Mode), Version: p.Version, Tombstones: projection.Tombstones(p.Tombstones),
		History: p.History, BatchSize: p.BatchSize, Linger: p.Linger, DeletedRetention: p.DeletedRetention,
		MaxVersionStep: p.MaxVersionStep,
	}
	for _, ix := range p.Indexes {
		pc.Indexes = append(pc.Indexes, projection.Index{Fields: ix.Fields, Unique: ix.Unique, Name: ix.Name})
	}
	if t, ok := topic(cfg, p.Topic); ok {
		pc.Replicas = t.Replicas
	}
	return pc
}

// topic returns the declared topic named name.
func topic(cfg *config.Config, name string) (config.Topic, bool) {
	i := slices.IndexFunc(cfg.Topics, func(t config.Topic) bool { return t.Name == name })
	if i < 0 {
		return config.Topic{}, false
	}
	return cfg.Topics[i], true
}

// kvReplicas is the replication of the snapshot API's cursor-key bucket: that of the most
// replicated topic.
func kvReplicas(cfg *config.Config) int {
	n := 1
	for _, t := range cfg.Topics {
		n = max(n, t.Replicas)
	}
	return n
}

// apiConfig maps the http, views and auth sections to the snapshot API's Config.
func apiConfig(cfg *config.Config, key []byte) (snapshotapi.Config, error) {
	ac := snapshotapi.Config{Database: cfg.Mongo.Database, CursorKey: key, Topics: cfg.HTTP.Topics,
		CORSOrigins: cfg.HTTP.CORSOrigins, RequestTimeout: cfg.HTTP.RequestTimeout, MaxWaits: cfg.HTTP.MaxWaits,
		MaxWatchers: cfg.HTTP.MaxWatchers, WatchBuffer: cfg.HTTP.WatchBuffer, WatchWindow: cfg.HTTP.WatchWindow,
		WatchWindowBytes: int64(cfg.HTTP.WatchWindowBytes), MaxCatchUps: cfg.HTTP.MaxCatchUps, TicketTTL: cfg.Auth.TicketTTL}
	for _, v := range cfg.Views {
		i := slices.IndexFunc(cfg.Projections, func(p config.Projection) bool { return p.Name == v.Projection })
		if i < 0 {
			return ac, fmt.Errorf("views: %s: projection %q is not declared", v.Name, v.Projection)
		}
		p := cfg.Projections[i]
		filters := map[string]snapshotapi.FieldType{}
		for f, t := range v.Filters {
			filters[f] = snapshotapi.FieldType(t)
		}
		t, _ := topic(cfg, p.Topic)
		ac.Views = append(ac.Views, snapshotapi.View{Name: v.Name, Projection: p.Name, Topic: p.Topic,
			Partitions: t.Partitions, Database: database(cfg, p.Database), Collection: p.Collection, Filters: filters,
			Sort: v.Sort, Fields: v.Fields, MaxLimit: v.MaxLimit, CacheControl: v.CacheControl, History: p.History})
	}
	var err error
	if ac.Tokens, ac.JWT, err = authConfig(cfg); err != nil {
		return ac, err
	}
	return ac, ac.Validate()
}

// authConfig maps the auth section: the static tokens and the JWT settings, with the RS256
// public key read from its file.
func authConfig(cfg *config.Config) ([]snapshotapi.Token, snapshotapi.JWT, error) {
	var tokens []snapshotapi.Token
	for _, t := range cfg.Auth.Tokens {
		tokens = append(tokens, snapshotapi.Token{Name: t.Name, Token: t.Token, Views: t.Views})
	}
	j := cfg.Auth.JWT
	sj := snapshotapi.JWT{HS256Secret: []byte(j.HS256Secret), Issuer: j.Issuer, Audience: j.Audience, ScopeClaim: j.ScopeClaim}
	if j.RS256PublicKey != "" {
		pem, err := os.ReadFile(j.RS256PublicKey)
		if err != nil {
			return nil, sj, fmt.Errorf("auth.jwt.rs256_public_key: %w", err)
		}
		if sj.RS256PublicKey, err = jwt.ParseRSAPublicKeyFromPEM(pem); err != nil {
			return nil, sj, fmt.Errorf("auth.jwt.rs256_public_key: %s: %w", j.RS256PublicKey, err)
		}
	}
	return tokens, sj, nil
}

// opsGuard is the access control of the operations endpoints: a token with the ops scope
// once tokens or JWTs are configured (config refuses an open process beyond loopback
// unless auth.open says so).
func opsGuard(cfg *config.Config) (func(http.Handler) http.Handler, error) {
	tokens, j, err := authConfig(cfg)
	if err != nil {
		return nil, err
	}
	return snapshotapi.RequireScope(tokens, j, snapshotapi.ScopeOps)
}

// statusSource is what a status reads: the declared topics and the projections' groups, the
// same in both processes and in `bridge status`.
func statusSource(cfg *config.Config) (topics []string, groups []ops.GroupRef) {
	for _, t := range cfg.Topics {
		topics = append(topics, t.Name)
	}
	for _, p := range cfg.Projections {
		groups = append(groups, ops.GroupRef{Topic: p.Topic, Group: p.Name})
	}
	return topics, groups
}
