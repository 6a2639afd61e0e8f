package changefeed

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/internal/retry"
)

// PositionBucket is the KV bucket holding every feed's saved position, one key per feed (the
// feed's name). Any NATS client can read it; deleting a feed's key resets the feed to its
// Start mode (see the package doc, "Operations").
const PositionBucket = "jetbus_changefeeds"

// Phases of a feed.
const (
	PhaseCopy   = "copy"
	PhaseStream = "stream"
)

// Position is a feed's saved position, as stored (JSON) under the feed's name in
// PositionBucket.
type Position struct {
	// Phase is PhaseCopy while a copy runs, PhaseStream after.
	Phase string `json:"phase"`
	// Token is the resume token (canonical Extended JSON) of the highest change whose
	// publish and every publish before it were acknowledged, or the post-batch resume token
	// MongoDB reported for a quiet stream after them. Empty with At set: start at At.
	Token json.RawMessage `json:"token,omitempty"`
	// At is a cluster time to start at (inclusive) when there is no Token yet (Start
	// timestamp).
	At *ClusterTime `json:"at,omitempty"`
	// ClusterTime is the cluster time of Token, when known.
	ClusterTime *ClusterTime `json:"cluster_time,omitempty"`
	// Saved is when the position was written.
	Saved time.Time `json:"saved"`
	// Copy is the state of the copy (PhaseCopy).
	Copy *CopyState `json:"copy,omitempty"`
	// HistoryLost is when the feed last found its position gone from the oplog and applied a
	// policy other than fail (zero: never).
	HistoryLost time.Time `json:"history_lost,omitzero"`
}

// CopyState is the progress of a copy.
type CopyState struct {
	// Epoch identifies this copy: copied documents are published with event IDs derived from
	// it, so a resumed copy re-publishes the same IDs (dropped as duplicates) and a new copy
	// (HistoryRecopy) publishes new events.
	Epoch string `json:"epoch"`
	// StartToken is where the change stream starts once the copy is done: captured before the
	// copy began, so a document changed during the copy ends with its latest state.
	StartToken json.RawMessage `json:"start_token"`
	// Namespaces are the collections to copy ("db.coll"), in order, listed when the copy
	// began; Done counts those finished.
	Namespaces []string `json:"namespaces"`
	Done       int      `json:"done"`
	// LastID is the _id (canonical Extended JSON of {"_id": …}) of the last document of
	// Namespaces[Done] whose publish and every one before it were acknowledged.
	LastID json.RawMessage `json:"last_id,omitempty"`
	// Copied counts documents published; Total is the estimated count when the copy began.
	Copied int64     `json:"copied"`
	Total  int64     `json:"total"`
	Began  time.Time `json:"began"`
}

// Progress returns Copied/Total, at most 1 (1 when Total is 0).
func (c *CopyState) Progress() float64 {
	if c == nil || c.Total <= 0 {
		return 1
	}
	return min(1, float64(c.Copied)/float64(c.Total))
}

// ClusterTime is a MongoDB cluster time (a BSON timestamp).
type ClusterTime struct {
	T uint32 `json:"t"`
	I uint32 `json:"i"`
}

// Time returns the wall time of the cluster time (second precision).
func (c *ClusterTime) Time() time.Time {
	if c == nil {
		return time.Time{}
	}
	return time.Unix(int64(c.T), 0)
}

func clusterTimeOf(ts bson.Timestamp) *ClusterTime {
	if ts.T == 0 && ts.I == 0 {
		return nil
	}
	return &ClusterTime{T: ts.T, I: ts.I}
}

// tokenTime reads the cluster time MongoDB encodes at the start of a resume token's _data
// (KeyString: a 0x82 type byte, then the timestamp's seconds and increment, big-endian).
// Resume tokens are opaque; this is only used to report how old a position is, never to
// resume.
func tokenTime(tok bson.Raw) *ClusterTime {
	s, ok := tok.Lookup("_data").StringValueOK()
	if !ok || len(s) < 18 {
		return nil
	}
	b, err := hex.DecodeString(s[:18])
	if err != nil || b[0] != 0x82 {
		return nil
	}
	return &ClusterTime{T: binary.BigEndian.Uint32(b[1:5]), I: binary.BigEndian.Uint32(b[5:9])}
}

// encodeToken renders a resume token for storage.
func encodeToken(tok bson.Raw) (json.RawMessage, error) {
	if len(tok) == 0 {
		return nil, nil
	}
	b, err := bson.MarshalExtJSON(tok, true, false)
	if err != nil {
		return nil, fmt.Errorf("changefeed: encode resume token: %w", err)
	}
	return b, nil
}

// decodeToken reads a stored resume token.
func decodeToken(b json.RawMessage) (bson.Raw, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var tok bson.Raw
	if err := bson.UnmarshalExtJSON(b, true, &tok); err != nil {
		return nil, fmt.Errorf("changefeed: decode saved resume token: %w", err)
	}
	return tok, nil
}

// positions reads and writes feeds' positions in PositionBucket, each write a compare-and-set
// on the revision last read or written, so a runner that lost its lease cannot overwrite its
// successor's position.
type positions struct {
	kv natsjs.KeyValue
}

// errPositionMoved is returned by save when the key changed since the runner last read or
// wrote it: another runner took over, or an operator reset it.
var errPositionMoved = errors.New("changefeed: the saved position was changed by someone else")

func openPositions(ctx context.Context, js natsjs.JetStream, replicas int) (*positions, error) {
	kv, err := js.KeyValue(ctx, PositionBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      PositionBucket,
			Description: "jetbus changefeed positions, one key per feed",
			History:     5,
			Replicas:    replicas,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, PositionBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("changefeed: bucket %s: %w", PositionBucket, retry.Opaque(err))
	}
	return &positions{kv: kv}, nil
}

// load returns the saved position of feed and its revision; nil and 0 when there is none.
func (p *positions) load(ctx context.Context, feed string) (*Position, uint64, error) {
	e, err := p.kv.Get(ctx, feed)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, 0, nil // never saved, or deleted: the next save creates it
	}
	if err != nil {
		return nil, 0, fmt.Errorf("changefeed: read position of %s: %w", feed, retry.Opaque(err))
	}
	var pos Position
	if err := json.Unmarshal(e.Value(), &pos); err != nil {
		return nil, 0, fmt.Errorf("changefeed: saved position of %s is not valid: %v", feed, err)
	}
	return &pos, e.Revision(), nil
}

// save writes pos if the key is still at rev, and returns the new revision.
func (p *positions) save(ctx context.Context, feed string, pos *Position, rev uint64) (uint64, error) {
	pos.Saved = time.Now().UTC()
	b, err := json.Marshal(pos)
	if err != nil {
		return 0, err
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = p.kv.Create(ctx, feed, b)
	} else {
		nrev, err = p.kv.Update(ctx, feed, b, rev)
	}
	if errors.Is(err, natsjs.ErrKeyExists) || errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: %s", errPositionMoved, feed)
	}
	if err != nil {
		return 0, fmt.Errorf("changefeed: save position of %s: %w", feed, retry.Opaque(err))
	}
	return nrev, nil
}

// waitChange blocks until the key's revision differs from rev (written or deleted by someone
// else), or ctx ends.
func (p *positions) waitChange(ctx context.Context, feed string, rev uint64) error {
	w, err := p.kv.Watch(ctx, feed, natsjs.IncludeHistory())
	if err != nil {
		return fmt.Errorf("changefeed: watch position of %s: %w", feed, retry.Opaque(err))
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("changefeed: watch position of %s ended", feed)
			}
			if e != nil && e.Revision() > rev {
				return nil
			}
		}
	}
}

// ResetPosition deletes a feed's saved position, so that its runner starts again by its Start
// mode: the operator's way out of ErrHistoryLost (as is `nats kv del jetbus_changefeeds
// <feed>`). A runner waiting in the failed state starts at once.
func ResetPosition(ctx context.Context, js natsjs.JetStream, feed string) error {
	kv, err := js.KeyValue(ctx, PositionBucket)
	if err != nil {
		return fmt.Errorf("changefeed: bucket %s: %w", PositionBucket, retry.Opaque(err))
	}
	if err := kv.Delete(ctx, feed); err != nil {
		return fmt.Errorf("changefeed: reset position of %s: %w", feed, retry.Opaque(err))
	}
	return nil
}
