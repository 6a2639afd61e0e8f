package minimongo

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Snapshot reads outside transactions (readConcern {level: "snapshot"} on find,
// aggregate and distinct, as MongoDB 5.0+ serves them): a read without
// atClusterTime reads the latest committed state and reports its cluster time
// as atClusterTime; a read with atClusterTime reads the state at that time. The
// server keeps the history each snapshot needs for snapshotHistoryWindow, as
// MongoDB keeps minSnapshotHistoryWindowInSeconds (300 s); reading at a time
// it no longer holds fails with SnapshotTooOld (239).

const snapshotHistoryWindow = 300 * time.Second

// snapshotCommands may read at a snapshot outside a transaction.
var snapshotCommands = map[string]bool{"find": true, "aggregate": true, "distinct": true}

// snapRead is a point in time snapshot reads have been served at.
type snapRead struct {
	ver     uint64 // the storage version of the state at that time
	created time.Time
	tx      *txn // a reader over that version (no writes of its own)
}

// snapshotRead resolves a snapshot read concern of a command outside a
// transaction: it sets r.snap to the reader of the requested time.
func (r *request) snapshotRead(atClusterTime *bson.Timestamp) error {
	if !snapshotCommands[r.name] {
		return newErr(codeInvalidOptions, "Command %s does not support { readConcern: { level: \"snapshot\" } }", r.name)
	}
	st := r.st
	now := st.clusterTime()
	ts := now
	if atClusterTime != nil {
		ts = *atClusterTime
		if ts.After(now) {
			return newErr(codeInvalidOptions, "readConcern atClusterTime value must not be greater than the current clusterTime. Requested clusterTime: %s; current clusterTime: %s", formatValue(ts), formatValue(now))
		}
	}
	sr := st.snapReads[ts]
	if sr == nil {
		if ts != now {
			return newErr(239, "Read timestamp %s is older than the oldest available timestamp.", formatValue(ts))
		}
		sr = &snapRead{ver: st.ver, created: time.Now(), tx: &txn{snapshot: st.ver, writes: map[string]map[string]*txWrite{}}}
		if st.snapReads == nil {
			st.snapReads = map[bson.Timestamp]*snapRead{}
		}
		st.snapReads[ts] = sr
	}
	r.snap, r.snapTS = sr.tx, ts
	return nil
}

// expireSnapshots forgets snapshots older than the history window.
func (st *storage) expireSnapshots(now time.Time) {
	for ts, sr := range st.snapReads {
		if now.Sub(sr.created) > snapshotHistoryWindow {
			delete(st.snapReads, ts)
		}
	}
}

// withAtClusterTime adds the snapshot's time to a snapshot read's reply: in the
// cursor document of find and aggregate, at the top level of distinct.
func (r *request) withAtClusterTime(reply bson.D) bson.D {
	out := make(bson.D, 0, len(reply)+1)
	for _, e := range reply {
		if cur, ok := e.Value.(bson.D); ok && e.Key == "cursor" {
			c := append(append(bson.D{}, cur...), bson.E{Key: "atClusterTime", Value: r.snapTS})
			out = append(out, bson.E{Key: "cursor", Value: c})
			continue
		}
		out = append(out, e)
	}
	if r.name == "distinct" {
		out = append(out, bson.E{Key: "atClusterTime", Value: r.snapTS})
	}
	return out
}
