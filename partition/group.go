package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// Bucket names and key layout (see the package doc).
const (
	// groupBucketPrefix + group is the bucket of a group's members and leases.
	groupBucketPrefix = "jetbus_group_"
	// AssignmentsBucket holds the current assignment of every (group, topic).
	AssignmentsBucket = "jetbus_assignments"
)

// GroupBucket returns the name of the KV bucket holding group's members and leases.
func GroupBucket(group string) string { return groupBucketPrefix + group }

// MemberKey returns the key of a member of (topic, group) in the group's bucket:
// "m.<topic>.<member>".
func MemberKey(topic, member string) string { return "m." + topic + "." + member }

// LeaseKey returns the key of a partition's lease in the group's bucket: "l.<topic>.p<n>".
func LeaseKey(topic string, p int) string { return "l." + topic + ".p" + strconv.Itoa(p) }

// AssignmentKey returns the key of (topic, group)'s assignment in AssignmentsBucket:
// "<group>.<topic>".
func AssignmentKey(topic, group string) string { return group + "." + topic }

// Group is a handle on the KV state of one (topic, group): membership, leases and the stored
// assignment. It is safe for concurrent use.
type Group struct {
	cfg     Config
	kv      natsjs.KeyValue // members and leases; MaxAge = TTL
	assign  natsjs.KeyValue // assignments; no expiry
	stream  natsjs.Stream   // the group bucket's stream, for raw reads of lease markers
	timeout Timeouts

	live atomic.Pointer[string] // this member's liveness subject, once it answers there
	// reconnect is how long this member's connection takes at most to come back after the
	// server dropped it (reconnectBound), advertised with the liveness subject.
	reconnect atomic.Int64
}

// OpenGroup creates (or opens) the buckets of cfg's group and returns a handle on them. The
// group bucket is created with MaxAge = cfg.TTL and limit markers, so every watcher sees a
// silent member or an unrenewed lease expire; it fails with ErrTTLMismatch when the bucket
// exists with another TTL. Options: see Config.
func OpenGroup(ctx context.Context, js JetStream, cfg Config) (*Group, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	markerTTL := max(cfg.TTL, time.Second)
	// Look the buckets up first: creating goes through the meta leader, which is slow on a
	// busy cluster, and they exist for every member but the first.
	kv, err := js.KeyValue(ctx, GroupBucket(cfg.Group))
	if err == nil {
		err = natsjs.ErrBucketExists
	} else if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:         GroupBucket(cfg.Group),
			Description:    "jetbus members and partition leases of group " + cfg.Group,
			History:        1,
			TTL:            cfg.TTL,
			LimitMarkerTTL: markerTTL,
			Replicas:       cfg.Replicas,
		})
	}
	if errors.Is(err, natsjs.ErrBucketExists) {
		if kv == nil {
			kv, err = js.KeyValue(ctx, GroupBucket(cfg.Group))
		} else {
			err = nil
		}
		if err == nil {
			var st natsjs.KeyValueStatus
			if st, err = kv.Status(ctx); err == nil && st.TTL() != cfg.TTL {
				return nil, fmt.Errorf("%w: bucket %s has TTL %s, this member %s", ErrTTLMismatch, GroupBucket(cfg.Group), st.TTL(), cfg.TTL)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("partition: group bucket %s: %w", GroupBucket(cfg.Group), retry.Opaque(err))
	}
	akv, err := js.KeyValue(ctx, AssignmentsBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		akv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      AssignmentsBucket,
			Description: "jetbus partition assignments, one key per group and topic",
			History:     1,
			Replicas:    cfg.Replicas,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			akv, err = js.KeyValue(ctx, AssignmentsBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("partition: bucket %s: %w", AssignmentsBucket, retry.Opaque(err))
	}
	stream, err := js.Stream(ctx, "KV_"+GroupBucket(cfg.Group))
	if err != nil {
		return nil, fmt.Errorf("partition: group bucket stream: %w", retry.Opaque(err))
	}
	return &Group{cfg: cfg, kv: kv, assign: akv, stream: stream, timeout: cfg.Timeouts()}, nil
}

// Config returns the group's configuration with defaults filled in (MemberID, TTL, …).
func (g *Group) Config() Config { return g.cfg }

// StoredAssignment is the assignment of a (topic, group) as kept in AssignmentsBucket.
type StoredAssignment struct {
	// Members are the member IDs the assignment was computed for, sorted.
	Members []string `json:"members"`
	// Owners[p] is the member owning partition p.
	Owners []string `json:"owners"`
	// AsOf is the revision of the group bucket up to which the writer had seen the member
	// list. A member whose view is older does not overwrite the assignment: it waits for its
	// watcher to catch up.
	AsOf uint64 `json:"as_of,omitempty"`
	// Revision is the KV revision of the assignment (0: none stored yet).
	Revision uint64 `json:"-"`
}

func (a *StoredAssignment) matches(members []string, n int) bool {
	return a != nil && len(a.Owners) == n && slices.Equal(a.Members, members)
}

// Assignment reads the stored assignment; a missing one is returned as a zero
// StoredAssignment.
func (g *Group) Assignment(ctx context.Context) (*StoredAssignment, error) {
	e, err := g.assign.Get(ctx, AssignmentKey(g.cfg.Topic, g.cfg.Group))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return &StoredAssignment{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read assignment: %w", retry.Opaque(err))
	}
	return decodeAssignment(e)
}

func decodeAssignment(e natsjs.KeyValueEntry) (*StoredAssignment, error) {
	a := &StoredAssignment{Revision: e.Revision()}
	if e.Operation() != natsjs.KeyValuePut {
		return a, nil
	}
	if err := json.Unmarshal(e.Value(), a); err != nil {
		return nil, fmt.Errorf("partition: decode assignment %s: %v", e.Key(), err)
	}
	return a, nil
}

// Advance stores Rebalance(prev.Owners, members, n) unless prev already matches, with a
// compare-and-set on prev.Revision. It returns the stored assignment, or an error wrapping
// ErrAssignmentConflict when another member stored one first: read it again and retry.
//
// asOf is the group bucket revision up to which the caller has seen the member list; it is
// stored with the assignment.
func (g *Group) Advance(ctx context.Context, prev *StoredAssignment, members []string, n int, asOf uint64) (*StoredAssignment, error) {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if prev.matches(ms, n) {
		return prev, nil
	}
	next := &StoredAssignment{Members: ms, Owners: Rebalance(prev.Owners, ms, n), AsOf: max(asOf, prev.AsOf)}
	b, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	key := AssignmentKey(g.cfg.Topic, g.cfg.Group)
	if prev.Revision == 0 {
		next.Revision, err = g.assign.Create(ctx, key, b)
	} else {
		next.Revision, err = g.assign.Update(ctx, key, b, prev.Revision)
	}
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) || errors.Is(err, natsjs.ErrKeyExists) {
		return nil, fmt.Errorf("%w: %s", ErrAssignmentConflict, key)
	}
	if err != nil {
		return nil, fmt.Errorf("partition: store assignment %s: %w", key, retry.Opaque(err))
	}
	return next, nil
}

// watchAssignment watches the stored assignment of (topic, group).
func (g *Group) watchAssignment(ctx context.Context) (natsjs.KeyWatcher, error) {
	return g.assign.Watch(ctx, AssignmentKey(g.cfg.Topic, g.cfg.Group))
}

func validTopicGroup(topic, group string) error {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return err
	}
	return jetbus.ValidateGroup(group)
}
