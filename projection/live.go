package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/internal/retry"
)

// Live is a projection's live generation: its document in jetbus_projections (see
// docs/views.md). Readers find the view's collection and consumer group here; without a
// document they are the configured collection and the projection's name (generation 0).
type Live struct {
	Name       string    `bson:"_id" json:"name"`
	Generation int       `bson:"generation" json:"generation"`
	Collection string    `bson:"collection" json:"collection"`
	Group      string    `bson:"group" json:"group"`
	Switched   time.Time `bson:"switched,omitempty" json:"switched,omitzero"`
	// Rebuild is the rebuild in progress, if any: its progress, and its lock.
	Rebuild *RebuildProgress `bson:"rebuild,omitempty" json:"rebuild,omitempty"`
	// Previous is the generation the last switch retired, until its collections are dropped.
	Previous *Retired `bson:"previous,omitempty" json:"previous,omitempty"`
}

// Retired is a generation replaced by a rebuild: dropped a grace period after the switch.
type Retired struct {
	Generation int       `bson:"generation" json:"generation"`
	Collection string    `bson:"collection" json:"collection"`
	Group      string    `bson:"group" json:"group"`
	Until      time.Time `bson:"until" json:"until"`
}

// RebuildProgress is the state of a rebuild, recorded in the projection's Live document about
// every second while it runs.
type RebuildProgress struct {
	// Generation, Collection and Group are what the rebuild builds.
	Generation int    `bson:"generation" json:"generation"`
	Collection string `bson:"collection" json:"collection"`
	Group      string `bson:"group" json:"group"`
	// Owner identifies the process running it (host and pid).
	Owner   string    `bson:"owner" json:"owner"`
	Started time.Time `bson:"started" json:"started"`
	// Updated is the last time the rebuild recorded its progress; a rebuild silent for
	// RebuildLockTTL is considered dead and another may start.
	Updated time.Time `bson:"updated" json:"updated"`
	// Done counts the events written (or skipped) so far, Total is Done plus the group's lag
	// (it grows while events keep coming), Rate is events per second over the last seconds.
	Done  uint64        `bson:"done" json:"done"`
	Total uint64        `bson:"total" json:"total"`
	Rate  float64       `bson:"rate" json:"rate"`
	ETA   time.Duration `bson:"eta" json:"eta"`
	// CaughtUp is set once the new generation caught up (see Rebuild): its lag reached zero,
	// or it wrote every event the live generation had written while events kept coming (then
	// Done may be short of Total by the events in flight).
	CaughtUp bool `bson:"caught_up" json:"caught_up"`
}

// RebuildLockTTL is how long a rebuild may go without recording progress before another
// rebuild of the same projection may take over.
const RebuildLockTTL = 30 * time.Second

// ReadLive returns the live generation of projection name, whose configured collection is
// collection: its document in jetbus_projections, or generation 0 when there is none.
func ReadLive(ctx context.Context, db *mongo.Database, name, collection string) (*Live, error) {
	l, err := readLive(ctx, db, name, collection)
	if err != nil {
		return nil, fmt.Errorf("projection: read %s: %w", ProjectionsCollection, retry.Opaque(err))
	}
	return l, nil
}

func readLive(ctx context.Context, db *mongo.Database, name, collection string) (*Live, error) {
	var l Live
	err := db.Collection(ProjectionsCollection).FindOne(ctx, bson.D{{Key: fieldID, Value: name}}).Decode(&l)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &Live{Name: name, Collection: collection, Group: name}, nil
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}
