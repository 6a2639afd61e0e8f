package changefeed

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/partition"
)

// Format is how a change is written as an event.
type Format string

// Formats.
const (
	// FormatDocument: the payload is the document after the change; a delete is a tombstone
	// (JSON null).
	FormatDocument Format = "document"
	// FormatEnvelope: the payload is an envelope {op, operationType, before, after,
	// updateDescription, source, ts_ms} in Debezium's shape (see the package doc).
	FormatEnvelope Format = "envelope"
)

// FullDocument says where an update's full document comes from, as MongoDB's
// $changeStream.fullDocument.
type FullDocument string

// FullDocument modes.
const (
	// FullDocumentUpdateLookup: the document as it is when the change is read (MongoDB looks
	// it up); the default.
	FullDocumentUpdateLookup FullDocument = "updateLookup"
	// FullDocumentWhenAvailable: the post-image recorded with the change when the collection
	// records them (changeStreamPreAndPostImages); otherwise the feed looks the document up.
	FullDocumentWhenAvailable FullDocument = "whenAvailable"
	// FullDocumentRequired: the recorded post-image; MongoDB fails the change stream when it
	// is missing, and the feed stops with ErrFeedFailed.
	FullDocumentRequired FullDocument = "required"
)

// Start says where a feed without a saved position starts.
type Start string

// Start modes.
const (
	// StartLatest: changes made from now on.
	StartLatest Start = "latest"
	// StartTimestamp: changes made at or after Config.StartAt (while the oplog holds them).
	StartTimestamp Start = "timestamp"
	// StartCopyExisting: every existing document first (a resumable copy), then the changes
	// made since the copy began.
	StartCopyExisting Start = "copy_existing"
)

// HistoryPolicy says what a feed does when its saved position is no longer in the oplog.
type HistoryPolicy string

// History policies.
const (
	// HistoryFail: publish nothing, report ErrHistoryLost (Ready, Status, the
	// changefeed_history_lost_total metric, the log) until the saved position is reset.
	HistoryFail HistoryPolicy = "fail"
	// HistoryLatest: continue with the changes made from now on; the changes in between are
	// not published (logged, counted, shown in Status).
	HistoryLatest HistoryPolicy = "latest"
	// HistoryRecopy: copy every document again (a new copy), then stream.
	HistoryRecopy HistoryPolicy = "recopy"
)

// Defaults and limits of Config.
const (
	DefaultFormat        = FormatDocument
	DefaultFullDocument  = FullDocumentUpdateLookup
	DefaultStart         = StartLatest
	DefaultHistoryPolicy = HistoryFail
	DefaultHeartbeat     = 10 * time.Second
	DefaultMaxInFlight   = 1000
	DefaultSaveInterval  = 200 * time.Millisecond
	DefaultCopyBatchSize = 1000
	DefaultFailedRetry   = 30 * time.Second
	MaxMaxInFlight       = 100000
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Template placeholders of Config.Topic.
const (
	placeholderDatabase   = "{database}"
	placeholderCollection = "{collection}"
)

// Config configures one feed: a change stream on a collection, a database or the whole
// deployment, published into a topic. The zero value of every field but Name, Topic and the
// namespace is a usable default.
type Config struct {
	// Name names the feed: its saved position (key Name in KV bucket PositionBucket) and its
	// lease. [a-z0-9][a-z0-9_-]{0,63}.
	Name string
	// Database is the database watched; with Collection empty, the whole database. Both
	// empty: every database of the deployment (but admin, config and local).
	Database string
	// Collection is the collection watched (in Database).
	Collection string
	// Pipeline holds aggregation stages appended to the change stream (and applied to the
	// documents of a copy, shaped as insert events): $match, $project, $addFields, $set and
	// $unset, which must keep the fields a feed reads (_id, operationType, ns,
	// documentKey, clusterTime). Validate refuses other stages.
	Pipeline mongo.Pipeline
	// Topic is the target topic. It may contain {collection} (a feed of a database or the
	// deployment) and {database} (a feed of the deployment): one topic per collection.
	Topic string
	// Format is FormatDocument (default) or FormatEnvelope.
	Format Format
	// FullDocument is where updates get the document from (default
	// FullDocumentUpdateLookup).
	FullDocument FullDocument
	// Start is where a feed without a saved position starts (default StartLatest).
	Start Start
	// StartAt is the cluster time to start from with StartTimestamp.
	StartAt time.Time
	// OnHistoryLost is the policy when the saved position is gone (default HistoryFail).
	OnHistoryLost HistoryPolicy
	// Heartbeat is how often a feed that sees no change saves the position MongoDB reports
	// for its quiet stream (the post-batch resume token), so that it can resume after the
	// oplog rolled over (default DefaultHeartbeat).
	Heartbeat time.Duration
	// MaxInFlight bounds publishes awaiting acknowledgement (default DefaultMaxInFlight).
	MaxInFlight int
	// SaveInterval is how often, at most, the position is saved while changes flow (default
	// DefaultSaveInterval). A crash re-publishes what was acknowledged since the last save;
	// JetStream drops those re-publishes as duplicates (see the package doc).
	SaveInterval time.Duration
	// CopyBatchSize is the cursor batch size of a copy (default DefaultCopyBatchSize).
	CopyBatchSize int
	// FailedRetry is how long a feed whose change stream MongoDB refused waits before trying
	// again (default DefaultFailedRetry). A lost history with HistoryFail is not retried.
	FailedRetry time.Duration
	// LeaseTTL is the TTL of the feed's lease (default partition.DefaultTTL): a standby
	// takes over within about LeaseTTL of the active runner's death.
	LeaseTTL time.Duration
	// MemberID names this runner in the lease (default: a fresh UUIDv7 per New).
	MemberID string
	// Replicas of the KV buckets when this feed creates them (default 1).
	Replicas int
}

// Validate reports whether c is usable. Its errors wrap ErrInvalidConfig (or
// jetbus.ErrInvalidTopic for the topic) and name the field.
func (c Config) Validate() error {
	if !namePattern.MatchString(c.Name) {
		return fmt.Errorf("%w: Name %q must match %s", ErrInvalidConfig, c.Name, namePattern)
	}
	if err := validateNamespace(c.Database, c.Collection); err != nil {
		return err
	}
	if err := validateTopicTemplate(c.Topic, c.Database, c.Collection); err != nil {
		return err
	}
	if err := validatePipeline(c.Pipeline); err != nil {
		return err
	}
	switch c.Format {
	case "", FormatDocument, FormatEnvelope:
	default:
		return fmt.Errorf("%w: Format %q must be %q or %q", ErrInvalidConfig, c.Format, FormatDocument, FormatEnvelope)
	}
	switch c.FullDocument {
	case "", FullDocumentUpdateLookup, FullDocumentWhenAvailable, FullDocumentRequired:
	default:
		return fmt.Errorf("%w: FullDocument %q must be updateLookup, whenAvailable or required", ErrInvalidConfig, c.FullDocument)
	}
	switch c.Start {
	case "", StartLatest, StartCopyExisting:
		if !c.StartAt.IsZero() {
			return fmt.Errorf("%w: StartAt is only used with Start %q", ErrInvalidConfig, StartTimestamp)
		}
	case StartTimestamp:
		if c.StartAt.IsZero() || c.StartAt.Unix() < 1 || c.StartAt.Unix() > 1<<32-1 {
			return fmt.Errorf("%w: Start %q needs a StartAt between 1970 and 2106", ErrInvalidConfig, StartTimestamp)
		}
	default:
		return fmt.Errorf("%w: Start %q must be latest, timestamp or copy_existing", ErrInvalidConfig, c.Start)
	}
	switch c.OnHistoryLost {
	case "", HistoryFail, HistoryLatest, HistoryRecopy:
	default:
		return fmt.Errorf("%w: OnHistoryLost %q must be fail, latest or recopy", ErrInvalidConfig, c.OnHistoryLost)
	}
	return validateCommon(c.MaxInFlight, c.LeaseTTL, c.MemberID, c.Replicas, map[string]time.Duration{
		"Heartbeat": c.Heartbeat, "SaveInterval": c.SaveInterval, "FailedRetry": c.FailedRetry,
	}, c.CopyBatchSize)
}

// validateCommon checks the settings feeds and drainers share.
func validateCommon(maxInFlight int, leaseTTL time.Duration, member string, replicas int, durations map[string]time.Duration, batch int) error {
	switch {
	case maxInFlight < 0 || maxInFlight > MaxMaxInFlight:
		return fmt.Errorf("%w: MaxInFlight must be between 0 and %d, got %d", ErrInvalidConfig, MaxMaxInFlight, maxInFlight)
	case leaseTTL < 0 || (leaseTTL > 0 && leaseTTL < partition.MinTTL):
		return fmt.Errorf("%w: LeaseTTL must be at least %s, got %s", ErrInvalidConfig, partition.MinTTL, leaseTTL)
	case replicas < 0 || replicas > 5:
		return fmt.Errorf("%w: Replicas must be between 0 and 5, got %d", ErrInvalidConfig, replicas)
	case batch < 0:
		return fmt.Errorf("%w: CopyBatchSize must not be negative, got %d", ErrInvalidConfig, batch)
	}
	for name, d := range durations {
		if d < 0 {
			return fmt.Errorf("%w: %s must not be negative, got %s", ErrInvalidConfig, name, d)
		}
	}
	if member != "" {
		if err := (partition.Config{Topic: "x", Group: "x", MemberID: member}).Validate(); err != nil {
			return fmt.Errorf("%w: MemberID: %v", ErrInvalidConfig, err)
		}
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Format == "" {
		c.Format = DefaultFormat
	}
	if c.FullDocument == "" {
		c.FullDocument = DefaultFullDocument
	}
	if c.Start == "" {
		c.Start = DefaultStart
	}
	if c.OnHistoryLost == "" {
		c.OnHistoryLost = DefaultHistoryPolicy
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.SaveInterval == 0 {
		c.SaveInterval = DefaultSaveInterval
	}
	if c.CopyBatchSize == 0 {
		c.CopyBatchSize = DefaultCopyBatchSize
	}
	if c.FailedRetry == 0 {
		c.FailedRetry = DefaultFailedRetry
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = partition.DefaultTTL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c, nil
}

// templated reports whether the topic depends on the change's namespace.
func (c Config) templated() bool { return strings.Contains(c.Topic, "{") }

// topicFor returns the topic of a change in db.coll.
func (c Config) topicFor(db, coll string) string {
	if !c.templated() {
		return c.Topic
	}
	return strings.NewReplacer(placeholderDatabase, db, placeholderCollection, coll).Replace(c.Topic)
}

func validateNamespace(db, coll string) error {
	if db == "" {
		if coll != "" {
			return fmt.Errorf("%w: Collection %q needs a Database", ErrInvalidConfig, coll)
		}
		return nil
	}
	if len(db) > 63 || strings.ContainsAny(db, "/\\. \"$*<>:|?\x00") {
		return fmt.Errorf("%w: Database %q is not a valid MongoDB database name", ErrInvalidConfig, db)
	}
	switch db {
	case "admin", "config", "local":
		return fmt.Errorf("%w: Database %q is internal to MongoDB and has no change stream", ErrInvalidConfig, db)
	}
	if coll != "" && (strings.HasPrefix(coll, "system.") || strings.ContainsAny(coll, "$\x00") || len(coll) > 200) {
		return fmt.Errorf("%w: Collection %q is not a valid MongoDB collection name", ErrInvalidConfig, coll)
	}
	return nil
}

func validateTopicTemplate(topic, db, coll string) error {
	if topic == "" {
		return fmt.Errorf("%w: Topic: empty", ErrInvalidConfig)
	}
	if strings.Contains(topic, placeholderCollection) && coll != "" {
		return fmt.Errorf("%w: Topic %q: %s needs a feed of a database or the deployment (Collection empty)", ErrInvalidConfig, topic, placeholderCollection)
	}
	if strings.Contains(topic, placeholderDatabase) && db != "" {
		return fmt.Errorf("%w: Topic %q: %s needs a feed of the deployment (Database empty)", ErrInvalidConfig, topic, placeholderDatabase)
	}
	probe := strings.NewReplacer(placeholderDatabase, "x", placeholderCollection, "x").Replace(topic)
	if strings.ContainsAny(probe, "{}") {
		return fmt.Errorf("%w: Topic %q: the only placeholders are %s and %s", ErrInvalidConfig, topic, placeholderDatabase, placeholderCollection)
	}
	if err := jetbus.ValidateTopic(probe); err != nil {
		return fmt.Errorf("Topic: %w", err)
	}
	return nil
}
