// Package streamcfg holds the rule the packages that update their JetStream streams and
// buckets at start (jetstream's topics, the DLQ) follow: ask the server for an update only
// when the stream lacks what is asked for. (The other buckets jetbus uses are created once and
// never updated.) And how often they look again when their create meets a stream another
// process created meanwhile (CreateTries).
//
// An update is a proposal to the stream's replicas, and nats-server 2.15.2 reads a stream's
// configuration without its lock while it creates a consumer on it: an update sent at every
// start, racing another process's consumer creation, is a data race in the server (and a
// needless proposal on a healthy cluster).
package streamcfg

import (
	"slices"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// CreateTries bounds how often a package looks at a stream or bucket again after its create
// met "already in use" (another process created it between the look and the create). One more
// look is the usual case; a stream others delete and create again, over and over, ends in the
// create's error rather than a loop.
const CreateTries = 3

// Holds reports whether have (a stream's configuration as the server reports it) already holds
// every field want sets. want's zero values stand for the server's defaults: no limit for
// MaxBytes, MaxMsgs and MaxMsgsPerSubject, one replica, and the duplicate window the server
// chose. Fields want does not set, and metadata keys not in want (such as the server's), are
// not compared; an update, when one is sent, replaces them with want's.
func Holds(have, want natsjs.StreamConfig) bool {
	if have.Description != want.Description || !slices.Equal(have.Subjects, want.Subjects) ||
		have.Retention != want.Retention || have.Discard != want.Discard || have.Storage != want.Storage ||
		have.MaxAge != want.MaxAge || limit(have.MaxBytes) != limit(want.MaxBytes) ||
		limit(have.MaxMsgs) != limit(want.MaxMsgs) || limit(have.MaxMsgsPerSubject) != limit(want.MaxMsgsPerSubject) ||
		replicas(have.Replicas) != replicas(want.Replicas) || have.AllowDirect != want.AllowDirect ||
		(want.Duplicates != 0 && have.Duplicates != want.Duplicates) {
		return false
	}
	return subset(want.Metadata, have.Metadata)
}

// BucketHolds is Holds for a key-value bucket: have is its configuration as the server reports
// it (KeyValueStatus.Config). Only what a KeyValueConfig carries is compared: a bucket's stream
// settings changed by hand (discard policy, rollups) are not repaired.
func BucketHolds(have, want natsjs.KeyValueConfig) bool {
	return have.Description == want.Description && max(have.History, 1) == max(want.History, 1) &&
		have.TTL == want.TTL && limit(int64(have.MaxValueSize)) == limit(int64(want.MaxValueSize)) &&
		limit(have.MaxBytes) == limit(want.MaxBytes) && have.Storage == want.Storage &&
		replicas(have.Replicas) == replicas(want.Replicas) && subset(want.Metadata, have.Metadata)
}

// limit is a stream limit as the server reports "none": -1.
func limit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func replicas(n int) int { return max(n, 1) }

// subset reports whether every key of want is in have with the same value.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
