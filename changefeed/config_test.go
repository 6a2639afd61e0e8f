package changefeed_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/changefeed"
)

func stage(op string, arg any) bson.D { return bson.D{{Key: op, Value: arg}} }

func TestConfigValidate(t *testing.T) {
	ok := changefeed.Config{Name: "orders-cdc", Database: "shop", Collection: "orders", Topic: "shop.orders"}
	cases := []struct {
		name   string
		mutate func(*changefeed.Config)
		want   string // "" valid; else a fragment of the error
		topic  bool   // the error wraps jetbus.ErrInvalidTopic instead
	}{
		{"minimal", func(*changefeed.Config) {}, "", false},
		{"database feed with template", func(c *changefeed.Config) { c.Collection, c.Topic = "", "shop.{collection}" }, "", false},
		{"deployment feed with template", func(c *changefeed.Config) { c.Database, c.Collection, c.Topic = "", "", "{database}.{collection}" }, "", false},
		{"bad name", func(c *changefeed.Config) { c.Name = "Orders" }, "Name", false},
		{"collection without database", func(c *changefeed.Config) { c.Database = "" }, "needs a Database", false},
		{"bad database", func(c *changefeed.Config) { c.Database = "a.b" }, "Database", false},
		{"internal database", func(c *changefeed.Config) { c.Database = "local" }, "internal", false},
		{"system collection", func(c *changefeed.Config) { c.Collection = "system.views" }, "Collection", false},
		{"database with NUL", func(c *changefeed.Config) { c.Database = "sh\x00op" }, "Database", false},
		{"collection with NUL", func(c *changefeed.Config) { c.Collection = "ord\x00ers" }, "Collection", false},
		{"no topic", func(c *changefeed.Config) { c.Topic = "" }, "Topic", false},
		{"bad topic", func(c *changefeed.Config) { c.Topic = "Shop" }, "Topic", true},
		{"collection placeholder on a collection feed", func(c *changefeed.Config) { c.Topic = "shop.{collection}" }, "{collection} needs", false},
		{"database placeholder on a database feed", func(c *changefeed.Config) { c.Collection, c.Topic = "", "{database}.x" }, "{database} needs", false},
		{"unknown placeholder", func(c *changefeed.Config) { c.Collection, c.Topic = "", "shop.{coll}" }, "placeholders", false},
		{"format", func(c *changefeed.Config) { c.Format = "avro" }, "Format", false},
		{"full document", func(c *changefeed.Config) { c.FullDocument = "always" }, "FullDocument", false},
		{"start", func(c *changefeed.Config) { c.Start = "earliest" }, "Start", false},
		{"timestamp without time", func(c *changefeed.Config) { c.Start = changefeed.StartTimestamp }, "StartAt", false},
		{"time without timestamp", func(c *changefeed.Config) { c.StartAt = time.Now() }, "StartAt", false},
		{"timestamp", func(c *changefeed.Config) { c.Start, c.StartAt = changefeed.StartTimestamp, time.Now() }, "", false},
		{"history policy", func(c *changefeed.Config) { c.OnHistoryLost = "ignore" }, "OnHistoryLost", false},
		{"negative heartbeat", func(c *changefeed.Config) { c.Heartbeat = -time.Second }, "Heartbeat", false},
		{"in flight", func(c *changefeed.Config) { c.MaxInFlight = -1 }, "MaxInFlight", false},
		{"lease TTL", func(c *changefeed.Config) { c.LeaseTTL = time.Millisecond }, "LeaseTTL", false},
		{"member", func(c *changefeed.Config) { c.MemberID = "a b" }, "MemberID", false},
		{"replicas", func(c *changefeed.Config) { c.Replicas = 7 }, "Replicas", false},
		{"pipeline match", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$match", bson.D{{Key: "operationType", Value: "insert"}})}
		}, "", false},
		{"pipeline project exclusion", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$project", bson.D{{Key: "fullDocument.secret", Value: 0}})}
		}, "", false},
		{"pipeline stage two keys", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{bson.D{{Key: "$match", Value: bson.D{}}, {Key: "$limit", Value: 1}}}
		}, "exactly one key", false},
		{"pipeline unsupported stage", func(c *changefeed.Config) { c.Pipeline = mongo.Pipeline{stage("$group", bson.D{})} }, "not supported", false},
		{"pipeline replaceRoot", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$replaceRoot", bson.D{{Key: "newRoot", Value: "$fullDocument"}})}
		}, "not supported", false},
		{"pipeline removes the token", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$project", bson.D{{Key: "_id", Value: 0}})}
		}, "_id", false},
		{"pipeline unsets ns", func(c *changefeed.Config) { c.Pipeline = mongo.Pipeline{stage("$unset", bson.A{"ns.db"})} }, `"ns"`, false},
		{"pipeline overwrites documentKey", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$set", bson.D{{Key: "documentKey", Value: 1}})}
		}, "documentKey", false},
		{"pipeline inclusion drops clusterTime", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$project", bson.D{{Key: "operationType", Value: 1}, {Key: "ns", Value: 1}, {Key: "documentKey", Value: 1}})}
		}, "clusterTime", false},
		{"pipeline match not a document", func(c *changefeed.Config) { c.Pipeline = mongo.Pipeline{stage("$match", "x")} }, "document", false},
		{"pipeline from YAML maps", func(c *changefeed.Config) {
			c.Pipeline = mongo.Pipeline{stage("$match", map[string]any{"operationType": map[string]any{"$in": []any{"insert"}}})}
		}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if tc.topic {
				assert.ErrorIs(t, err, jetbus.ErrInvalidTopic)
			} else {
				assert.ErrorIs(t, err, changefeed.ErrInvalidConfig)
				assert.ErrorIs(t, err, jetbus.ErrInvalidConfig)
			}
		})
	}
}

func TestOutboxConfigValidate(t *testing.T) {
	ok := changefeed.OutboxConfig{Name: "shop-outbox", Database: "shop", Collection: "outbox"}
	cases := []struct {
		name   string
		mutate func(*changefeed.OutboxConfig)
		want   string
	}{
		{"minimal", func(*changefeed.OutboxConfig) {}, ""},
		{"mark", func(c *changefeed.OutboxConfig) { c.After, c.Retention = changefeed.OutboxMark, time.Hour }, ""},
		{"bad name", func(c *changefeed.OutboxConfig) { c.Name = "" }, "Name"},
		{"no collection", func(c *changefeed.OutboxConfig) { c.Collection = "" }, "Collection"},
		{"bad collection", func(c *changefeed.OutboxConfig) { c.Collection = "a$b" }, "Collection"},
		{"after", func(c *changefeed.OutboxConfig) { c.After = "archive" }, "After"},
		{"retention", func(c *changefeed.OutboxConfig) { c.Retention = time.Millisecond }, "Retention"},
		{"in flight", func(c *changefeed.OutboxConfig) { c.MaxInFlight = changefeed.MaxMaxInFlight + 1 }, "MaxInFlight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, errors.Is(err, changefeed.ErrInvalidConfig))
		})
	}
}
