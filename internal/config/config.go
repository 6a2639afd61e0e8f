package config

import (
	"time"
)

// Config is the whole configuration file of the bridge and projector processes. Each field is
// declared once, here: its YAML key, description, default and example are struct tags, and
// parsing, validation and the reference (docs/config.md) all come from them.
//
// Tags: yaml (the key), desc, default and example (YAML text), enum (values separated by
// "|"), min and max (integers), required, check (a named check in checks.go), secret (never
// printed). A field of a struct reached only through structs (not through a list or a map)
// can also be set from the environment as JETBUS_<PATH> (the key path upper-cased, dots as
// underscores).
type Config struct {
	NATS        NATS         `yaml:"nats" desc:"How to reach NATS and JetStream. Flags: --nats-url, --nats-creds, --nats-nkey, --nats-user, --nats-password, --nats-token, --tls-ca, --tls-cert, --tls-key."`
	Mongo       Mongo        `yaml:"mongo" desc:"How to reach MongoDB: needed by projections, changefeeds and outboxes. Flag: --mongo-uri."`
	HTTP        HTTP         `yaml:"http" desc:"The HTTP servers of each process: /healthz, /readyz, /metrics and /v1/ops/status on addr (flag: --http-addr), and in the projector the snapshot API there too (or on api_addr when set)."`
	Log         Log          `yaml:"log" desc:"Logging (JSON lines on standard error). Flag: --log-level."`
	Shutdown    Shutdown     `yaml:"shutdown" desc:"Graceful shutdown on SIGTERM or SIGINT: stop fetching, drain in-flight work, release leases. A second signal exits at once."`
	Topics      []Topic      `yaml:"topics" desc:"Topics the processes ensure at start (create, or update to these settings). Projections, changefeeds and ingress may only name topics declared here."`
	Schemas     string       `yaml:"schemas" check:"dir" desc:"Directory of JSON Schema files, <dir>/<topic>/v<N>.json (with optional v<N>.meta.json). The bridge registers them at start, idempotently; an incompatible version stops it. Empty: no schemas pushed." example:"schemas"`
	DLQ         DLQ          `yaml:"dlq" desc:"The dead-letter stream and its safety net (the sweeper, run by the bridge)."`
	Ingress     Ingress      `yaml:"ingress" desc:"Ingress (bridge): plain NATS clients publish JSON to in.<topic>; the bridge validates, partitions and stores it. Off while allow is empty."`
	Changefeeds []Changefeed `yaml:"changefeeds" desc:"Changefeeds (bridge): MongoDB change streams published into topics, none lost and none doubled."`
	Outbox      []Outbox     `yaml:"outbox" desc:"Outbox drainers (bridge): documents an application writes in its own MongoDB transaction, published as events."`
	Projections []Projection `yaml:"projections" desc:"Projections (projector): topics materialized into MongoDB collections, one document per key. A projection's name is its consumer group."`
	Views       []View       `yaml:"views" desc:"Views (projector): what the snapshot API serves over HTTP from a projection's collection."`
	Auth        Auth         `yaml:"auth" desc:"Who may read views through the snapshot API: bearer tokens with view scopes, or JWTs. Without tokens and jwt the API is open."`
	Tracing     Tracing      `yaml:"tracing" desc:"OpenTelemetry tracing (docs/operations.md, Tracing): a span per ingress message, publish, delivery, dead letter, replay, projection batch write and snapshot API request, each continuing the event's (or request's) W3C trace context, exported over OTLP. Off by default, at no cost. The standard OTEL_* variables apply and win over these keys: OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT), OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; the SDK reads the others itself (OTEL_EXPORTER_OTLP_HEADERS, _CERTIFICATE, _TIMEOUT, OTEL_BSP_*). OTEL_SDK_DISABLED=true turns it off."`

	// File is the configuration file's path ("" when none was read); relative paths in the
	// file are resolved against its directory.
	File string `yaml:"-"`
}

// NATS says how to reach NATS. At most one of creds, nkey, user/password and token is set.
type NATS struct {
	URLs        []string `yaml:"urls" check:"nats-url" default:"[nats://127.0.0.1:4222]" desc:"Server URLs; a list, or one comma-separated string." example:"[nats://n1:4222, nats://n2:4222]"`
	Creds       string   `yaml:"creds" check:"path" desc:"User credentials file (JWT and NKey seed), as nsc writes it." example:"/etc/jetbus/nats.creds"`
	NKey        string   `yaml:"nkey" check:"path" desc:"NKey seed file." example:"/etc/jetbus/user.nk"`
	User        string   `yaml:"user" desc:"User name (with password)." example:"jetbus"`
	Password    string   `yaml:"password" secret:"true" desc:"Password (with user)." example:"${NATS_PASSWORD}"`
	Token       string   `yaml:"token" secret:"true" desc:"Authentication token." example:"${NATS_TOKEN}"`
	InboxPrefix string   `yaml:"inbox_prefix" default:"_INBOX" check:"inbox-prefix" desc:"Subject prefix of the replies to the process's own requests (JetStream API, KV reads, pulled events). Give each process a prefix of its own that untrusted clients may not subscribe to (deploy/README.md, NATS permissions): clients subscribe _INBOX.> for their replies, and would read the process's there." example:"_INBOX_bridge"`
	TLS         TLS      `yaml:"tls" desc:"TLS: a CA to verify the servers, and a client certificate for mutual TLS."`
}

// TLS names PEM files.
type TLS struct {
	CA   string `yaml:"ca" check:"path" desc:"CA certificate (PEM) the servers' certificates must chain to." example:"/etc/jetbus/ca.pem"`
	Cert string `yaml:"cert" check:"path" desc:"Client certificate (PEM), with key." example:"/etc/jetbus/client.pem"`
	Key  string `yaml:"key" check:"path" desc:"Client private key (PEM), with cert." example:"/etc/jetbus/client-key.pem"`
}

// Mongo says how to reach MongoDB.
type Mongo struct {
	URI      string `yaml:"uri" check:"mongo-uri" secret:"true" desc:"Connection string of a replica set (change streams and transactions need one). Required when projections, changefeeds or outboxes are declared." example:"mongodb://db1,db2,db3/?replicaSet=rs0"`
	Database string `yaml:"database" default:"jetbus" check:"database" desc:"Database of projections' collections and checkpoints, and the default database of changefeeds and outboxes."`
}

// HTTP configures each process's HTTP server.
type HTTP struct {
	Addr             string        `yaml:"addr" default:"127.0.0.1:8080" check:"addr" desc:"Listen address (host:port; port 0 picks a free one, logged at start). The default takes connections from this machine only; an address beyond loopback (:8080, 0.0.0.0:8080) needs auth configured, or auth.open." example:":8080"`
	RequestTimeout   time.Duration `yaml:"request_timeout" default:"10s" min:"1" desc:"Longest time one request may take."`
	MaxConnections   int           `yaml:"max_connections" default:"8192" min:"1" desc:"Open connections a process accepts, on all its listeners; one more is answered 503 (Retry-After: 1) and closed (http_refused_total{limit=\"connections\"})."`
	MaxRequests      int           `yaml:"max_requests" default:"1024" min:"1" desc:"Requests a process serves at once, but /healthz, /readyz and the snapshot API's watches (max_watchers bounds those); one more is answered 503 (Retry-After: 1) (http_refused_total{limit=\"requests\"})."`
	IdleTimeout      time.Duration `yaml:"idle_timeout" default:"60s" min:"1" desc:"How long a keep-alive connection may stay idle before it is closed."`
	MaxWaits         int           `yaml:"max_waits" default:"1024" min:"1" desc:"Snapshot API requests waiting for ?after= at once (woken by the projections' progress, not polling); one more is answered 503 (Retry-After: 1)."`
	MaxWatchers      int           `yaml:"max_watchers" default:"4096" min:"1" desc:"Snapshot API watches (?watch=true, Server-Sent Events) streaming at once; one more is answered 503 (Retry-After: 1). Watches take no place among max_requests, but each holds a connection (max_connections)."`
	WatchBuffer      int           `yaml:"watch_buffer" default:"1024" min:"1" desc:"Keys whose changes a watch holds for a client that reads more slowly than they come (a key's newer change replaces the one waiting). A client whose buffer is full and that falls behind the changes the process keeps is disconnected with an overflow event, and resumes with Last-Event-ID."`
	WatchWindow      time.Duration `yaml:"watch_window" default:"30s" min:"1" desc:"How long a process keeps the changes of a watched collection for its watches (and at least the last 4096, whatever their age), within watch_window_bytes: a watch whose reading of them is held up (the process short of CPU under a burst of changes) goes on where it was if it gets to them within the window, instead of being disconnected with an overflow event."`
	WatchWindowBytes ByteSize      `yaml:"watch_window_bytes" default:"64MiB" min:"1" desc:"Memory bound of the changes a process keeps of each watched collection (each counts twice its document's size and 320 bytes); past it the oldest go first, whatever watch_window says."`
	MaxCatchUps      int           `yaml:"max_catchups" default:"16" min:"1" desc:"Snapshot API watches that read a MongoDB change stream of their own at once (resuming from a position older than the changes the process keeps, until they meet them); the others wait their turn, streaming keep-alive comments."`
	CORSOrigins      []string      `yaml:"cors_origins" desc:"Origins allowed to call the snapshot API from a browser (\"*\": any)." example:"[https://app.example.com]"`
	APIAddr          string        `yaml:"api_addr" check:"addr" desc:"A separate listen address for the projector's snapshot API (host:port; port 0 picks a free one, logged at start). Empty (the default): the API is served on addr, beside the operations endpoints." example:"127.0.0.1:8090"`
	Topics           []string      `yaml:"topics" check:"topic" desc:"Keyed topics whose keys the snapshot API serves from their streams at /v1/topics/{topic}/keys/{key}; each must be declared keyed in topics. A token reads one with the scope topic:<name>." example:"[customers]"`
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level" default:"info" enum:"debug|info|warn|error" desc:"Lowest level logged."`
}

// Shutdown bounds a graceful shutdown.
type Shutdown struct {
	Timeout time.Duration `yaml:"timeout" default:"30s" min:"1" desc:"How long draining may take before the process gives up and exits 1. Keep it below the orchestrator's grace period (Kubernetes: terminationGracePeriodSeconds)."`
}

// Topic is one topic's stream.
type Topic struct {
	Name            string        `yaml:"name" required:"true" check:"topic" desc:"Topic name: lowercase dot-separated tokens, optionally ending in a version token (orders, orders.created.v2)." example:"orders"`
	Partitions      int           `yaml:"partitions" default:"1" min:"1" max:"4096" desc:"Partition count; it can grow, never shrink." example:"4"`
	Replicas        int           `yaml:"replicas" default:"1" min:"1" max:"5" desc:"Stream replicas (3 on a 3-node cluster)." example:"3"`
	MaxAge          time.Duration `yaml:"max_age" desc:"How long events are kept (0: forever)." example:"168h"`
	MaxBytes        ByteSize      `yaml:"max_bytes" desc:"Size bound of the stream; the oldest events go first (0: unlimited)." example:"10GiB"`
	DuplicateWindow time.Duration `yaml:"duplicate_window" default:"2m" desc:"How long a published event ID is remembered to drop duplicates."`
	Storage         string        `yaml:"storage" default:"file" enum:"file|memory" desc:"Where the stream stores events."`
	Keyed           bool          `yaml:"keyed" desc:"A keyed (compacted) topic: each event is stored under its key's subject, JetStream keeps the last keep_per_key events of each key and answers latest-by-key and state-at-time reads directly. Every event needs a key; a topic cannot change between plain and keyed."`
	KeepPerKey      int           `yaml:"keep_per_key" min:"0" desc:"Events kept per key of a keyed topic (0: all, within max_age). With 1 a group starting from the earliest event reads one event per key." example:"1"`
}

// DLQ configures the dead-letter stream.
type DLQ struct {
	Replicas      int           `yaml:"replicas" default:"1" min:"1" max:"5" desc:"Replicas of the DLQ's streams (DLQ, DLQ_REJECTS for ingress's refusals, and the advisory stream) and of its KV buckets (parking, and the replay records jetbus_dlq_replays)."`
	MaxAge        time.Duration `yaml:"max_age" default:"720h" desc:"How long dead letters are kept (0: forever). Letters dropped at this limit or max_bytes are counted in dlq_dropped_by_limit_total and logged." example:"2160h"`
	MaxBytes      ByteSize      `yaml:"max_bytes" default:"1GiB" desc:"Size bound of the DLQ stream; past it the oldest letters are dropped (0: unbounded). Messages ingress refused are kept apart, within rejects." example:"10GiB"`
	Parking       bool          `yaml:"parking" desc:"Park a key's later events behind its dead letter until it is replayed (per group)."`
	SweepInterval time.Duration `yaml:"sweep_interval" default:"1s" min:"1" desc:"How often the sweeper moves deliveries the server gave up on into the DLQ."`
	Rejects       DLQRejects    `yaml:"rejects" desc:"The messages ingress refused, kept in a stream of their own (DLQ_REJECTS) with bounds of their own: a flood of refused client traffic ages out refusals, never the handlers' dead letters. dlq list, count, show, replay and discard read both streams."`
}

// DLQRejects bounds the stream of ingress's refusals.
type DLQRejects struct {
	MaxAge   time.Duration `yaml:"max_age" default:"168h" desc:"How long refused messages are kept (0: forever). Refusals aging out at this limit are counted in dlq_dropped_by_limit_total{stream=\"DLQ_REJECTS\",limit=\"max_age\"} and logged at debug only (the stream working as meant); those dropped at max_bytes (a flood) under limit=\"max_bytes\", with a warning." example:"72h"`
	MaxBytes ByteSize      `yaml:"max_bytes" default:"256MiB" desc:"Size bound of the refusals' stream; past it the oldest refusals are dropped (0: unbounded). This keeps a flood of refused client traffic from filling the disk." example:"1GiB"`
	MaxBody  ByteSize      `yaml:"max_body" default:"64KiB" desc:"Body kept of each refused message (0: whole). A longer body keeps its first max_body bytes, with the whole body's size and SHA-256 (headers x-dlq-body-size, x-dlq-body-sha256); such a refusal cannot be replayed." example:"16KiB"`
}

// Ingress configures the ingress service.
type Ingress struct {
	Allow          []string      `yaml:"allow" check:"topic" desc:"Topics plain NATS clients may publish to (as in.<topic>); each must be declared in topics." example:"[orders]"`
	MaxMessageSize ByteSize      `yaml:"max_message_size" default:"1MiB" min:"1" desc:"Largest payload accepted; larger ones are refused with code too_large."`
	MaxInFlight    int           `yaml:"max_in_flight" default:"1000" min:"1" desc:"Messages held at once (awaiting JetStream's acknowledgement, a retry or a dead letter); ingress stops reading beyond it (back-pressure)."`
	MaxPending     int           `yaml:"max_pending" default:"65536" min:"1" desc:"Messages NATS buffers for ingress while it is not reading; beyond this or max_pending_bytes NATS drops them (counted in ingress_dropped_total)."`
	MaxPendingSize ByteSize      `yaml:"max_pending_bytes" default:"64MiB" min:"1" desc:"Bytes NATS buffers for ingress while it is not reading (see max_pending). Past half of it, ingress drops unchecked the messages larger than 1/32 of the room left (counted in ingress_shed_total; a request is answered unavailable), so that large messages cannot crowd small ones out."`
	AckTimeout     time.Duration `yaml:"ack_timeout" default:"5s" min:"1" desc:"How long ingress waits for JetStream's acknowledgement before answering a request unavailable (with the event ID to retry with)."`
	TSWindow       time.Duration `yaml:"ts_window" default:"24h" min:"1" desc:"How far a client's x-ts may be from the bridge's clock, before or after; further is refused (reserved_header)."`
	ReplyPrefixes  []string      `yaml:"reply_prefixes" default:"[_INBOX]" check:"reply-prefix" desc:"Subject prefixes ingress replies to; a request with another reply subject is refused (not_allowed) and dead-lettered, so clients cannot make ingress publish elsewhere." example:"[_INBOX, _INBOX_app.]"`
}

// Changefeed is one MongoDB change stream published into a topic.
type Changefeed struct {
	Name          string        `yaml:"name" required:"true" check:"name" desc:"Feed name: its resume token key in KV and its lease." example:"orders-cdc"`
	Database      string        `yaml:"database" check:"database" desc:"Database watched (default mongo.database)." example:"shop"`
	Collection    string        `yaml:"collection" check:"collection" desc:"Collection watched; empty watches the whole database." example:"orders"`
	Deployment    bool          `yaml:"deployment" desc:"Watch every database of the deployment (but admin, config and local); database and collection stay empty."`
	Pipeline      []Stage       `yaml:"pipeline" check:"pipeline" desc:"Aggregation stages applied to the change stream (and to a copy's documents, shaped as insert events): $match, $project, $addFields, $set, $unset, keeping _id, operationType, ns, documentKey and clusterTime." example:"[{$match: {operationType: {$in: [insert, update, replace, delete]}}}]"`
	Topic         string        `yaml:"topic" required:"true" check:"topic-template" desc:"Target topic; {collection} is replaced by the change's collection and {database} (deployment feeds) by its database: one topic per collection." example:"shop.orders"`
	Format        string        `yaml:"format" default:"document" enum:"document|envelope" desc:"document: the full document (a delete is a tombstone); envelope: op, before, after, updateDescription, source."`
	FullDocument  string        `yaml:"full_document" default:"updateLookup" enum:"updateLookup|whenAvailable|required" desc:"How updates get the full document: looked up, or from post-images."`
	Start         string        `yaml:"start" default:"latest" enum:"latest|timestamp|copy_existing" desc:"Where a feed without a saved position starts: new changes only, changes since start_at, or a copy of every existing document first."`
	StartAt       time.Time     `yaml:"start_at" desc:"RFC 3339 time for start: timestamp." example:"2026-01-01T00:00:00Z"`
	OnHistoryLost string        `yaml:"on_history_lost" default:"fail" enum:"fail|latest|recopy" desc:"When the saved position is gone from the oplog: fail (readyz false until someone acts), skip to the latest change, or copy the collection again."`
	Heartbeat     time.Duration `yaml:"heartbeat" default:"10s" min:"1" desc:"How often a quiet feed advances its saved position."`
	MaxInFlight   int           `yaml:"max_in_flight" default:"1000" min:"1" desc:"Publishes awaiting acknowledgement at once."`
}

// Stage is one aggregation pipeline stage, kept as written.
type Stage = map[string]any

// Outbox is one outbox collection drained into topics.
type Outbox struct {
	Name       string        `yaml:"name" required:"true" check:"name" desc:"Drainer name: its lease. What is pending is the collection itself (documents not deleted, or not marked sent)." example:"shop-outbox"`
	Database   string        `yaml:"database" check:"database" desc:"Database of the outbox collection (default mongo.database)." example:"shop"`
	Collection string        `yaml:"collection" required:"true" check:"collection" desc:"The outbox collection; documents {_id: event ID, topic, key, payload, headers, ts}." example:"outbox"`
	After      string        `yaml:"after" default:"delete" enum:"delete|mark" desc:"What happens to a document once published: deleted, or marked sent and expired by a TTL index after retention."`
	Retention  time.Duration `yaml:"retention" default:"24h" min:"1" desc:"How long sent documents are kept when after is mark."`
	Topics     []string      `yaml:"topics" check:"topic" desc:"Topics its documents may name, each declared in topics (empty: every declared topic). A document naming another is dead-lettered and the drainer moves on: whoever can write the collection publishes only there." example:"[orders]"`
}

// Projection materializes a topic into a collection.
type Projection struct {
	Name             string        `yaml:"name" required:"true" check:"group" desc:"Projection name, also its consumer group." example:"orders-view"`
	Topic            string        `yaml:"topic" required:"true" check:"topic" desc:"Topic read; it must be declared in topics." example:"orders"`
	Database         string        `yaml:"database" check:"database" desc:"Database of the collection (default mongo.database)."`
	Collection       string        `yaml:"collection" required:"true" check:"collection" desc:"Collection written, one document per event key." example:"orders"`
	Mode             string        `yaml:"mode" default:"replace" enum:"replace|merge" desc:"replace: the payload is the whole state; merge: the payload's top-level fields are set, its null fields unset."`
	Version          string        `yaml:"version" check:"json-pointer" desc:"JSON pointer to the version in the payload (e.g. /version); empty: the stream sequence. Older versions never overwrite newer ones. A version is an integer from 0 to 9223372036854775807 (a tombstone's in the x-version header); an event with another is dead-lettered." example:"/version"`
	MaxVersionStep   int64         `yaml:"max_version_step" default:"1125899906842624" min:"1" desc:"With version: the most one event may raise its key's stored version. An event further above is dead-lettered, not applied, so that one event cannot put a key beyond every later version (2^63-1 after 5); a key with no stored version takes any version. The default, 2^50, is 35 years of microseconds (13 days of nanoseconds: raise it for those); 9223372036854775807 removes the bound." example:"1000000"`
	Tombstones       string        `yaml:"tombstones" default:"delete" enum:"delete|keep" desc:"What a null payload does: delete the document, or keep it marked _deleted."`
	Indexes          []Index       `yaml:"indexes" desc:"Secondary indexes created at start (idempotently); a view may sort only on a field that leads one."`
	History          time.Duration `yaml:"history" desc:"Keep every applied version in <collection>_history for this long, for reads at a past time (0: no history)." example:"720h"`
	BatchSize        int           `yaml:"batch_size" default:"500" min:"1" max:"10000" desc:"The most events fetched and written per bulk write: batches grow toward it with the backlog and shrink when the topic is quiet."`
	Linger           time.Duration `yaml:"linger" default:"5ms" desc:"How long a partition waits for a batch to fill before writing what it has: the most latency a quiet topic adds (under a backlog batches fill to batch_size first)."`
	DeletedRetention time.Duration `yaml:"deleted_retention" default:"24h" min:"1" desc:"With tombstones: delete, how long a deleted key keeps a marker with its version (readers skip it) before MongoDB's TTL monitor removes it: an event of that key older than the tombstone arriving within this time cannot bring the key back."`
}

// Index is a secondary index of a projection's collection.
type Index struct {
	Fields []string `yaml:"fields" required:"true" check:"index-field" desc:"Indexed fields in order; a leading - sorts descending." example:"[status, -updated]"`
	Unique bool     `yaml:"unique" desc:"Refuse two documents with the same values (a clash dead-letters the event)."`
	Name   string   `yaml:"name" desc:"Index name (default: MongoDB's, from the fields)." example:"by_status"`
}

// View is what the snapshot API serves from a projection.
type View struct {
	Name         string            `yaml:"name" required:"true" check:"name" desc:"View name, the {view} of /v1/views/{view}." example:"orders"`
	Projection   string            `yaml:"projection" required:"true" desc:"The projection whose collection the view reads." example:"orders-view"`
	Filters      map[string]string `yaml:"filters" check:"field" enum:"string|number|bool|time" desc:"Fields a client may filter on (?field=op.value), each with its type; each must lead an index of the projection (or be _id), unless scan is set." example:"{status: string, total: number, created: time}"`
	Sort         []string          `yaml:"sort" check:"field" desc:"Fields a client may order by; each must lead an index of the projection (or be _id)." example:"[created]"`
	Fields       []string          `yaml:"fields" check:"field" desc:"Fields returned (empty: the whole document)." example:"[status, total, created]"`
	MaxLimit     int               `yaml:"max_limit" default:"100" min:"1" max:"1000" desc:"Largest page a list request may ask for."`
	CacheControl string            `yaml:"cache_control" default:"no-cache" desc:"Cache-Control header of responses." example:"max-age=5"`
	Scan         bool              `yaml:"scan" desc:"Allow filters on fields that lead no index of the projection: each such request may then scan the whole collection (for up to http.request_timeout). Without it, every filter field must lead one of the projection's indexes (or be _id)."`
}

// Auth configures the snapshot API's access control.
type Auth struct {
	Open   bool    `yaml:"open" desc:"Serve views, /v1/ops/status and /metrics without authentication on an address beyond loopback, on purpose (logged at warn on every start). Without it, a process whose http.addr or http.api_addr is not a loopback address refuses to start unless tokens or jwt are configured. /healthz and /readyz are always open."`
	Tokens []Token `yaml:"tokens" desc:"Static bearer tokens, each with the views it may read (at least 16 characters)."`
	JWT    JWT     `yaml:"jwt" desc:"JSON Web Tokens signed with HS256 or RS256; the scope claim lists the views a token may read."`
	// TicketTTL bounds the tickets browsers watch views with.
	TicketTTL time.Duration `yaml:"ticket_ttl" default:"5m" min:"1" desc:"How long a ticket from POST /v1/tickets opens watches (?watch=true&ticket=…) of its views: a browser's EventSource cannot send Authorization, and a long-lived token never goes in a URL. A stream outlives its ticket; an EventSource reconnecting after it expired is refused (401) and needs a new ticket (with since=<last id>)."`
}

// Token is a static bearer token.
type Token struct {
	Name  string   `yaml:"name" desc:"Who holds the token (for logs)." example:"dashboard"`
	Token string   `yaml:"token" required:"true" secret:"true" desc:"The token; use ${ENV_VAR} to keep it out of the file." example:"${DASHBOARD_TOKEN}"`
	Views []string `yaml:"views" required:"true" desc:"Views it may read, topic:<name> for a topic of http.topics, and ops for /v1/ops/status and /metrics (\"*\": all)." example:"[orders]"`
}

// JWT configures JWT validation. Set at most one of hs256_secret and rs256_public_key.
type JWT struct {
	HS256Secret    string `yaml:"hs256_secret" secret:"true" desc:"Shared secret of HS256 tokens (at least 32 bytes)." example:"${JWT_SECRET}"`
	RS256PublicKey string `yaml:"rs256_public_key" check:"path" desc:"PEM file of the RS256 public key." example:"/etc/jetbus/jwt.pub"`
	Issuer         string `yaml:"issuer" desc:"Required iss claim (empty: not checked)." example:"https://auth.example.com/"`
	Audience       string `yaml:"audience" desc:"Required aud claim (empty: not checked)." example:"jetbus"`
	ScopeClaim     string `yaml:"scope_claim" default:"views" desc:"Claim listing the views a token may read (a list or a space-separated string; \"*\": all)."`
}

// Tracing configures OpenTelemetry tracing.
type Tracing struct {
	Enabled      bool     `yaml:"enabled" desc:"Trace and export spans. Off (the default), no tracing SDK runs and the spans cost nothing; events still carry the trace context they are given."`
	Endpoint     string   `yaml:"endpoint" check:"otlp-url" desc:"Base URL of the OTLP receiver (an OpenTelemetry Collector, Jaeger, Tempo…), as OTEL_EXPORTER_OTLP_ENDPOINT: http:// for plaintext, https:// for TLS; over http spans go to its /v1/traces. Empty: the OTEL_* variables, else the SDK's default, https://localhost:4318 (http) or localhost:4317 over TLS (grpc)." example:"http://otel-collector:4318"`
	Protocol     string   `yaml:"protocol" default:"http" enum:"http|grpc" desc:"OTLP over HTTP with protobuf (port 4318) or over gRPC (port 4317)."`
	SamplerRatio float64  `yaml:"sampler_ratio" default:"1" min:"0" max:"1" desc:"Share of new traces sampled, from 0 to 1 (parentbased_traceidratio): a span whose parent came with a sampling decision (a client's traceparent, an event's) follows it." example:"0.1"`
	ServiceName  string   `yaml:"service_name" desc:"service.name of the spans. Empty: jetbus-bridge or jetbus-projector, the process's." example:"jetbus-bridge-eu"`
	Baggage      []string `yaml:"baggage" check:"baggage-key" desc:"W3C baggage keys events may carry (the baggage header, kept on the event and handed to every consumer); members of other keys are dropped. Empty (the default): events carry no baggage. Applies with tracing off too." example:"[tenant]"`
}

// UsesMongo reports whether anything declared needs MongoDB.
func (c *Config) UsesMongo() bool {
	return len(c.Projections) > 0 || len(c.Changefeeds) > 0 || len(c.Outbox) > 0
}
