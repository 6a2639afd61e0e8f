package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/internal/retry"
)

// Checkpoint is the applied position of one partition of a topic in a group's view: its
// document in jetbus_checkpoints.
type Checkpoint struct {
	ID  string    `bson:"_id"`
	Seq uint64    `bson:"seq"`
	TS  time.Time `bson:"ts"`
}

// checkpoint is a transactional projection's knowledge of its partition's checkpoint.
type checkpoint struct {
	id     string
	seq    uint64
	exists bool
}

// ReadCheckpoint returns the stream sequence up to which group's view holds the effect of
// partition p of topic (0 when nothing was applied yet): what a read-your-writes wait
// compares a position token "<p>:<seq>" with. db is the projection's database.
func ReadCheckpoint(ctx context.Context, db *mongo.Database, group, topic string, p int) (uint64, error) {
	cp, err := readCheckpoint(ctx, db.Collection(CheckpointsCollection), CheckpointID(group, topic, p))
	if err != nil {
		return 0, fmt.Errorf("projection: read checkpoint: %w", retry.Opaque(err))
	}
	return cp.seq, nil
}

func readCheckpoint(ctx context.Context, coll *mongo.Collection, id string) (*checkpoint, error) {
	var doc struct {
		Seq int64 `bson:"seq"`
	}
	err := coll.FindOne(ctx, bson.D{{Key: fieldID, Value: id}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &checkpoint{id: id}, nil
	}
	if err != nil {
		return nil, err
	}
	return &checkpoint{id: id, seq: uint64(max(doc.Seq, 0)), exists: true}, nil
}

// advanceCheckpoint moves a changelog projection's checkpoint to seq unless it is further
// already ($max: an owner that lost the partition never moves it back).
func advanceCheckpoint(ctx context.Context, coll *mongo.Collection, id string, seq uint64) error {
	_, err := coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: id}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "seq", Value: int64(seq)}, {Key: "ts", Value: time.Now().UTC().Truncate(time.Millisecond)}}}},
		options.UpdateOne().SetUpsert(true))
	return err
}
