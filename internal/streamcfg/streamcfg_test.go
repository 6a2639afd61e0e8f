package streamcfg_test

import (
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/jetbus/jetbus/internal/streamcfg"
)

// TestHolds: a want's zero values stand for the server's defaults, fields want sets are
// compared exactly, and what want does not set (server metadata) does not count.
func TestHolds(t *testing.T) {
	want := natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxAge: time.Hour, Metadata: map[string]string{"k": "v"}}
	// As the server reports a stream created from want: its defaults filled in.
	have := want
	have.MaxBytes, have.MaxMsgs, have.MaxMsgsPerSubject, have.Replicas, have.Duplicates = -1, -1, -1, 1, 2*time.Minute
	have.Metadata = map[string]string{"k": "v", "_nats.level": "1"}
	assert.True(t, streamcfg.Holds(have, want))

	for name, change := range map[string]func(c *natsjs.StreamConfig){
		"subjects":         func(c *natsjs.StreamConfig) { c.Subjects = []string{"s.>", "t.>"} },
		"max age":          func(c *natsjs.StreamConfig) { c.MaxAge = 2 * time.Hour },
		"max bytes":        func(c *natsjs.StreamConfig) { c.MaxBytes = 1 << 20 },
		"per subject":      func(c *natsjs.StreamConfig) { c.MaxMsgsPerSubject = 1 },
		"replicas":         func(c *natsjs.StreamConfig) { c.Replicas = 3 },
		"duplicate window": func(c *natsjs.StreamConfig) { c.Duplicates = time.Minute },
		"metadata":         func(c *natsjs.StreamConfig) { c.Metadata = map[string]string{"k": "w"} },
		"description":      func(c *natsjs.StreamConfig) { c.Description = "d" },
		"direct":           func(c *natsjs.StreamConfig) { c.AllowDirect = true },
		"storage":          func(c *natsjs.StreamConfig) { c.Storage = natsjs.MemoryStorage },
	} {
		w := want
		change(&w)
		assert.False(t, streamcfg.Holds(have, w), name)
	}
}

// TestBucketHolds: the same for a bucket, as KeyValueStatus.Config reports it.
func TestBucketHolds(t *testing.T) {
	want := natsjs.KeyValueConfig{Bucket: "b", Description: "d", TTL: time.Hour}
	have := want
	have.History, have.MaxBytes, have.MaxValueSize, have.Replicas = 1, -1, -1, 1
	assert.True(t, streamcfg.BucketHolds(have, want))
	for name, change := range map[string]func(c *natsjs.KeyValueConfig){
		"history":     func(c *natsjs.KeyValueConfig) { c.History = 5 },
		"ttl":         func(c *natsjs.KeyValueConfig) { c.TTL = 0 },
		"description": func(c *natsjs.KeyValueConfig) { c.Description = "" },
		"replicas":    func(c *natsjs.KeyValueConfig) { c.Replicas = 3 },
		"max bytes":   func(c *natsjs.KeyValueConfig) { c.MaxBytes = 1 << 20 },
	} {
		w := want
		change(&w)
		assert.False(t, streamcfg.BucketHolds(have, w), name)
	}
}
