package snapshotapi

import (
	"crypto/rsa"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/mongoname"
)

// FieldType is the type a filter value is parsed to.
type FieldType string

// Field types of View.Filters.
const (
	// String values are compared as MongoDB compares strings (binary, no collation).
	String FieldType = "string"
	// Number values are JSON numbers: integers within int64 are sent as 64-bit integers,
	// others as doubles; MongoDB compares numbers by value across types.
	Number FieldType = "number"
	// Bool values are true or false.
	Bool FieldType = "bool"
	// Time values are RFC 3339 times or Unix milliseconds. They match a field holding a BSON
	// date, or a string (a payload's time, since JSON has no date type) compared as MongoDB
	// compares strings: see the package doc.
	Time FieldType = "time"
)

// Defaults and limits of Config.
const (
	DefaultDatabase       = "jetbus"
	DefaultMaxLimit       = 100
	MaxMaxLimit           = 1000
	DefaultCacheControl   = "no-cache"
	DefaultRequestTimeout = 10 * time.Second
	DefaultWait           = 2 * time.Second
	MaxWait               = 10 * time.Second
	DefaultMaxQueryBytes  = 4096
	DefaultMaxHeaderBytes = 16 << 10
	DefaultMaxBodyBytes   = 1 << 10
	DefaultCacheBytes     = 32 << 20
	DefaultMaxWaits       = 1024
	DefaultMaxPageBytes   = 4 << 20
	DefaultMaxWatchers    = 4096
	DefaultWatchBuffer    = 1024
	DefaultKeepAlive      = 15 * time.Second
	DefaultScopeClaim     = "views"
	DefaultJWTLeeway      = 30 * time.Second
	// MinCursorKeyBytes is the shortest Config.CursorKey accepted.
	MinCursorKeyBytes = 32
	// MaxFilters bounds the filter conditions of one list request.
	MaxFilters = 16
	// MaxInValues bounds the values of one in.(…) condition.
	MaxInValues = 100
	// MaxPositions bounds the positions of one after= parameter.
	MaxPositions = 64
)

// Defaults of the changes kept for watches and of their catch-ups (Config.WatchWindow,
// Config.WatchWindowBytes, Config.MaxCatchUps).
const (
	DefaultWatchWindow      = 30 * time.Second
	DefaultWatchWindowBytes = 64 << 20
	DefaultMaxCatchUps      = 16
)

// Reserved query parameters: no filter field may be named like one.
var reservedParams = []string{"order", "limit", "cursor", "after", "wait", "meta", "at", "watch", "since", "ticket"}

var (
	viewNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	fieldPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// View is what the API serves from one projection's collection, at /v1/views/{Name}.
type View struct {
	// Name is the {view} of the routes ([a-z0-9][a-z0-9_-]{0,63}). Required.
	Name string
	// Projection names the projection behind the view. Its record in jetbus_projections
	// (docs/views.md) names the live collection and consumer group after a rebuild; without
	// one the live collection is Collection and the group is Projection. Required.
	Projection string
	// Topic is the projection's topic: its checkpoints answer ?after=, and its schema in the
	// registry describes the view in /openapi.json. Required.
	Topic string
	// Partitions of Topic (0: unknown; ?after= positions are then not range-checked).
	Partitions int
	// Database holds the collection, its history and the checkpoints (default
	// Config.Database).
	Database string
	// Collection is the projection's configured collection. Required.
	Collection string
	// Filters are the fields a client may filter on, with their types.
	Filters map[string]FieldType
	// Sort are the fields a client may order by besides _id; each should lead an index
	// (Server.Ready checks the live collection).
	Sort []string
	// Fields are the fields returned besides _id (empty: the whole document).
	Fields []string
	// MaxLimit is the largest page (default DefaultMaxLimit, at most MaxMaxLimit); it is
	// also the page size when a request names no limit.
	MaxLimit int
	// CacheControl is the Cache-Control of the view's responses (default "no-cache").
	CacheControl string
	// History is the retention of the projection's history (<collection>_history); 0: the
	// projection keeps none, and ?at= answers 422.
	History time.Duration
}

// Token is a static bearer token and the views it may read ("*": all).
type Token struct {
	Name  string
	Token string
	Views []string
}

// JWT verifies JSON Web Tokens. Set one of HS256Secret and RS256PublicKey.
type JWT struct {
	HS256Secret    []byte
	RS256PublicKey *rsa.PublicKey
	// Issuer and Audience, when set, must be the token's iss and one of its aud.
	Issuer   string
	Audience string
	// ScopeClaim lists the views a token may read: a list of strings or one space-separated
	// string; "*" is every view (default DefaultScopeClaim).
	ScopeClaim string
	// Leeway tolerates clock skew on exp, nbf and iat (default DefaultJWTLeeway).
	Leeway time.Duration
}

func (j JWT) enabled() bool { return len(j.HS256Secret) > 0 || j.RS256PublicKey != nil }

// Config configures a Server. Every field but Views and CursorKey has a usable zero value.
type Config struct {
	// Views are the views served.
	Views []View
	// Topics are the keyed topics whose keys are served from their streams at
	// /v1/topics/{topic}/keys/{key} (Deps.Keys reads them). Undeclared topics are 404s, so a
	// client cannot read every stream of the account. A token reads one with the scope
	// entry TopicScope(topic) ("topic:<name>") or "*".
	Topics []string
	// Database is the default database of views (default DefaultDatabase).
	Database string
	// CursorKey signs list cursors (HMAC-SHA256), at least MinCursorKeyBytes. Every replica
	// serving the same views must use the same key, or a cursor from one is refused by the
	// next: LoadCursorKey keeps one in NATS KV for all of them. Required.
	CursorKey []byte
	// Tokens are static bearer tokens. With neither Tokens nor JWT the API is open.
	Tokens []Token
	// JWT verifies bearer tokens that are JWTs.
	JWT JWT
	// CORSOrigins may call the API from a browser ("*": any; empty: no CORS headers).
	CORSOrigins []string
	// RequestTimeout bounds one request, waiting for ?after= included (default
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// DefaultWait is how long ?after= waits when the request names no wait (default
	// DefaultWait); MaxWait the most a request may ask for (default and at most MaxWait).
	DefaultWait time.Duration
	MaxWait     time.Duration
	// MaxQueryBytes bounds the query string (default DefaultMaxQueryBytes); longer ones get
	// 400 query_too_long.
	MaxQueryBytes int
	// MaxHeaderBytes bounds the request's header fields (default DefaultMaxHeaderBytes);
	// more gets 431.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes; no route reads one);
	// more gets 413.
	MaxBodyBytes int64
	// CacheBytes bounds the document cache (default DefaultCacheBytes; negative: no cache).
	// The cache is live only while Run runs (see the package doc).
	CacheBytes int64
	// MaxWaits bounds the requests waiting for ?after= at once (default DefaultMaxWaits);
	// one more gets 503 unavailable with Retry-After.
	MaxWaits int
	// MaxPageBytes bounds the documents of one list page, as stored (default
	// DefaultMaxPageBytes): a page that would hold more ends early, with its next link, but
	// always holds one document.
	MaxPageBytes int
	// MaxWatchers bounds the watches (?watch=true) streaming at once (default
	// DefaultMaxWatchers); one more gets 503 unavailable with Retry-After.
	MaxWatchers int
	// WatchBuffer bounds the keys whose changes a watch holds for a client that reads more
	// slowly than they come (default DefaultWatchBuffer): a key's newer change replaces
	// the one waiting; past the bound the client is disconnected with an overflow event,
	// and resumes with Last-Event-ID.
	WatchBuffer int
	// WatchWindow is how long the changes of a watched collection are kept in the process
	// for its watches (default DefaultWatchWindow): a watch whose reading of them is held up
	// (the process short of CPU under a burst) goes on from where it was if it gets to them
	// within the window. At least the last 4,096 are kept, whatever their age, within
	// WatchWindowBytes.
	WatchWindow time.Duration
	// WatchWindowBytes bounds the memory of the changes kept of each watched collection
	// (default DefaultWatchWindowBytes): each counts twice its document's BSON size (stored
	// and rendered) and 320 bytes; past the bound the oldest go first, whatever WatchWindow
	// says.
	WatchWindowBytes int64
	// MaxCatchUps bounds the watches reading a change stream of their own at once, to catch
	// up from a position older than the changes kept (default DefaultMaxCatchUps); the
	// others wait their turn, streaming keep-alive comments.
	MaxCatchUps int
	// KeepAlive is how often an idle watch sends a comment (default DefaultKeepAlive).
	KeepAlive time.Duration
	// TicketTTL is how long a ticket (POST /v1/tickets) is accepted by a watch (default
	// DefaultTicketTTL).
	TicketTTL time.Duration
	// SwitchTimeout bounds how long a watch waits, after a rebuild's switch, for the new
	// generation to catch up with the one it was reading (default DefaultSwitchTimeout);
	// then it ends with position_expired.
	SwitchTimeout time.Duration
}

// Validate reports whether c is usable; errors wrap ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	if len(c.CursorKey) < MinCursorKeyBytes {
		return fmt.Errorf("%w: CursorKey must be at least %d bytes, got %d (LoadCursorKey makes one)", ErrInvalidConfig, MinCursorKeyBytes, len(c.CursorKey))
	}
	if c.Database != "" {
		if err := mongoname.Database(c.Database); err != nil {
			return fmt.Errorf("%w: Database: %v", ErrInvalidConfig, err)
		}
	}
	seen := map[string]bool{}
	for i, v := range c.Views {
		if err := v.validate(); err != nil {
			return fmt.Errorf("%w: Views[%d]: %v", ErrInvalidConfig, i, err)
		}
		if seen[v.Name] {
			return fmt.Errorf("%w: Views[%d].Name: %q is declared twice", ErrInvalidConfig, i, v.Name)
		}
		seen[v.Name] = true
	}
	topics := map[string]bool{}
	for i, t := range c.Topics {
		if err := jetbus.ValidateTopic(t); err != nil {
			return fmt.Errorf("%w: Topics[%d]: %v", ErrInvalidConfig, i, err)
		}
		if topics[t] {
			return fmt.Errorf("%w: Topics[%d]: %q is declared twice", ErrInvalidConfig, i, t)
		}
		topics[t] = true
	}
	for i, t := range c.Tokens {
		if t.Token == "" {
			return fmt.Errorf("%w: Tokens[%d].Token is empty", ErrInvalidConfig, i)
		}
		if len(t.Views) == 0 {
			return fmt.Errorf("%w: Tokens[%d].Views is empty", ErrInvalidConfig, i)
		}
		for _, v := range t.Views {
			if topic, ok := strings.CutPrefix(v, "topic:"); ok {
				if !topics[topic] {
					return fmt.Errorf("%w: Tokens[%d].Views: topic %q is not declared in Topics", ErrInvalidConfig, i, topic)
				}
				continue
			}
			if v != "*" && v != ScopeOps && !seen[v] {
				return fmt.Errorf("%w: Tokens[%d].Views: view %q is not declared", ErrInvalidConfig, i, v)
			}
		}
	}
	if len(c.JWT.HS256Secret) > 0 && c.JWT.RS256PublicKey != nil {
		return fmt.Errorf("%w: JWT: set one of HS256Secret and RS256PublicKey", ErrInvalidConfig)
	}
	if !c.JWT.enabled() && (c.JWT.Issuer != "" || c.JWT.Audience != "") {
		return fmt.Errorf("%w: JWT: Issuer and Audience need HS256Secret or RS256PublicKey", ErrInvalidConfig)
	}
	if c.JWT.Leeway < 0 {
		return fmt.Errorf("%w: JWT.Leeway is negative", ErrInvalidConfig)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RequestTimeout", c.RequestTimeout}, {"DefaultWait", c.DefaultWait}, {"MaxWait", c.MaxWait}} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, d.name)
		}
	}
	if c.MaxWait > MaxWait {
		return fmt.Errorf("%w: MaxWait is at most %s, got %s", ErrInvalidConfig, MaxWait, c.MaxWait)
	}
	if c.MaxWait > 0 && c.DefaultWait > c.MaxWait {
		return fmt.Errorf("%w: DefaultWait %s exceeds MaxWait %s", ErrInvalidConfig, c.DefaultWait, c.MaxWait)
	}
	if c.MaxQueryBytes < 0 || c.MaxHeaderBytes < 0 || c.MaxBodyBytes < 0 || c.MaxWaits < 0 || c.MaxPageBytes < 0 ||
		c.MaxWatchers < 0 || c.WatchBuffer < 0 || c.WatchWindow < 0 || c.WatchWindowBytes < 0 || c.MaxCatchUps < 0 ||
		c.KeepAlive < 0 || c.TicketTTL < 0 || c.SwitchTimeout < 0 {
		return fmt.Errorf("%w: MaxQueryBytes, MaxHeaderBytes, MaxBodyBytes, MaxWaits, MaxPageBytes, MaxWatchers, WatchBuffer, WatchWindow, WatchWindowBytes, MaxCatchUps, KeepAlive, TicketTTL and SwitchTimeout may not be negative", ErrInvalidConfig)
	}
	return nil
}

func (v View) validate() error {
	if !viewNamePattern.MatchString(v.Name) {
		return fmt.Errorf("Name %q must match %s", v.Name, viewNamePattern)
	}
	if err := jetbus.ValidateGroup(v.Projection); err != nil {
		return fmt.Errorf("Projection: %v", err)
	}
	if err := jetbus.ValidateTopic(v.Topic); err != nil {
		return fmt.Errorf("Topic: %v", err)
	}
	if v.Database != "" {
		if err := mongoname.Database(v.Database); err != nil {
			return fmt.Errorf("Database: %v", err)
		}
	}
	if err := mongoname.Collection(v.Collection); err != nil {
		return fmt.Errorf("Collection: %v", err)
	}
	if v.Partitions < 0 {
		return fmt.Errorf("Partitions is negative")
	}
	for f, t := range v.Filters {
		if err := ValidateField(f); err != nil {
			return fmt.Errorf("Filters: %v", err)
		}
		if slices.Contains(reservedParams, f) {
			return fmt.Errorf("Filters: %q is a reserved query parameter (%s)", f, strings.Join(reservedParams, ", "))
		}
		switch t {
		case String, Number, Bool, Time:
		default:
			return fmt.Errorf("Filters[%s]: type %q is not string, number, bool or time", f, t)
		}
	}
	for _, f := range v.Sort {
		if err := ValidateField(f); err != nil {
			return fmt.Errorf("Sort: %v", err)
		}
	}
	for _, f := range v.Fields {
		if err := ValidateField(f); err != nil {
			return fmt.Errorf("Fields: %v", err)
		}
	}
	if v.MaxLimit < 0 || v.MaxLimit > MaxMaxLimit {
		return fmt.Errorf("MaxLimit must be between 1 and %d, got %d", MaxMaxLimit, v.MaxLimit)
	}
	if strings.ContainsAny(v.CacheControl, "\r\n\x00") {
		return fmt.Errorf("CacheControl holds a control character")
	}
	if v.History < 0 {
		return fmt.Errorf("History is negative")
	}
	return nil
}

// ValidateField checks a field a view names (View.Filters, View.Sort, View.Fields): a
// MongoDB field path (mongoname.FieldPath) whose names are plain identifiers (letters,
// digits and _, not starting with a digit), since a client writes them in a URL's query; and
// not one of the fields the projection keeps for itself.
func ValidateField(f string) error {
	if err := mongoname.FieldPath(f); err != nil {
		return err
	}
	if !fieldPattern.MatchString(f) {
		return fmt.Errorf("%q is not a field (letters, digits and _, dotted paths; not $-prefixed)", f)
	}
	if f == "_deleted" || f == "_topic" {
		return fmt.Errorf("%q is internal to the projection", f)
	}
	return nil
}

// authDefaults checks what access control needs of c (Tokens, JWT) and fills in the JWT
// defaults: what RequireScope uses of a Config.
func (c Config) authDefaults() (Config, error) {
	for i, t := range c.Tokens {
		if t.Token == "" {
			return c, fmt.Errorf("%w: Tokens[%d].Token is empty", ErrInvalidConfig, i)
		}
	}
	if len(c.JWT.HS256Secret) > 0 && c.JWT.RS256PublicKey != nil {
		return c, fmt.Errorf("%w: JWT: set one of HS256Secret and RS256PublicKey", ErrInvalidConfig)
	}
	if c.JWT.Leeway < 0 {
		return c, fmt.Errorf("%w: JWT.Leeway is negative", ErrInvalidConfig)
	}
	if c.JWT.ScopeClaim == "" {
		c.JWT.ScopeClaim = DefaultScopeClaim
	}
	if c.JWT.Leeway == 0 {
		c.JWT.Leeway = DefaultJWTLeeway
	}
	return c, nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxWait == 0 {
		c.MaxWait = MaxWait
	}
	if c.DefaultWait == 0 {
		c.DefaultWait = min(DefaultWait, c.MaxWait)
	}
	if c.MaxQueryBytes == 0 {
		c.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.MaxWaits == 0 {
		c.MaxWaits = DefaultMaxWaits
	}
	if c.MaxPageBytes == 0 {
		c.MaxPageBytes = DefaultMaxPageBytes
	}
	if c.MaxWatchers == 0 {
		c.MaxWatchers = DefaultMaxWatchers
	}
	if c.WatchBuffer == 0 {
		c.WatchBuffer = DefaultWatchBuffer
	}
	if c.WatchWindow == 0 {
		c.WatchWindow = DefaultWatchWindow
	}
	if c.WatchWindowBytes == 0 {
		c.WatchWindowBytes = DefaultWatchWindowBytes
	}
	if c.MaxCatchUps == 0 {
		c.MaxCatchUps = DefaultMaxCatchUps
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.TicketTTL == 0 {
		c.TicketTTL = DefaultTicketTTL
	}
	if c.SwitchTimeout == 0 {
		c.SwitchTimeout = DefaultSwitchTimeout
	}
	if c.JWT.ScopeClaim == "" {
		c.JWT.ScopeClaim = DefaultScopeClaim
	}
	if c.JWT.Leeway == 0 {
		c.JWT.Leeway = DefaultJWTLeeway
	}
	views := make([]View, len(c.Views))
	for i, v := range c.Views {
		if v.Database == "" {
			v.Database = c.Database
		}
		if v.MaxLimit == 0 {
			v.MaxLimit = DefaultMaxLimit
		}
		if v.CacheControl == "" {
			v.CacheControl = DefaultCacheControl
		}
		views[i] = v
	}
	c.Views = views
	return c, nil
}
