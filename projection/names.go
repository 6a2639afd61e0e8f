package projection

import (
	"fmt"
	"strconv"
)

// Collections jetbus keeps in a projection's database (see docs/views.md).
const (
	// CheckpointsCollection holds one document per (group, topic, partition):
	// {_id: "<group>/<topic>/p<n>", seq, ts}, seq being the highest stream sequence whose
	// effect is in the view.
	CheckpointsCollection = "jetbus_checkpoints"
	// ProjectionsCollection holds one document per rebuilt projection: its live generation,
	// collection and group (see Live).
	ProjectionsCollection = "jetbus_projections"
	// OwnersCollection records, per partition of a transactional projection, the MongoDB
	// session of its current owner: {_id: "<group>/<topic>/p<n>", lsid, ts}. The next owner
	// kills that session (aborting a transaction a crashed owner left open) before it starts.
	OwnersCollection = "jetbus_owners"
	// HistorySuffix is appended to a view's collection name for its history.
	HistorySuffix = "_history"
	// VersionHeader carries a tombstone's version in a projection versioned by a payload
	// field (a tombstone has no payload to hold it).
	VersionHeader = "x-version"
)

// Fields jetbus writes in a changelog view document; a payload may not use them.
const (
	fieldID      = "_id"
	fieldVersion = "_v"
	fieldTS      = "_ts"
	fieldTopic   = "_topic"
	fieldDeleted = "_deleted"
	fieldExpires = "_expires"
)

// CheckpointID is the _id of the checkpoint of partition p of topic for group.
func CheckpointID(group, topic string, p int) string {
	return group + "/" + topic + "/p" + strconv.Itoa(p)
}

// HistoryCollection is the name of the history collection of a view's collection.
func HistoryCollection(collection string) string { return collection + HistorySuffix }

// GenerationGroup is the consumer group of generation gen of projection name: the name itself
// for generation 0, "<name>-g<gen>" after.
func GenerationGroup(name string, gen int) string {
	if gen == 0 {
		return name
	}
	return fmt.Sprintf("%s-g%d", name, gen)
}

// GenerationCollection is the collection of generation gen of a view configured as
// collection: the collection itself for generation 0, "<collection>-g<gen>" after.
func GenerationCollection(collection string, gen int) string {
	if gen == 0 {
		return collection
	}
	return fmt.Sprintf("%s-g%d", collection, gen)
}
