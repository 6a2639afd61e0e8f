package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// GroupStatus is a snapshot of a (topic, group): its members, the stored assignment and the
// partitions' leases. It is what an /ops/partitions endpoint or a CLI shows.
type GroupStatus struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
	// TTL is the group's member TTL (its bucket's MaxAge).
	TTL time.Duration `json:"ttl"`
	// Partitions is the topic's partition count (stream metadata), or the assignment's
	// length when the topic cannot be read.
	Partitions int `json:"partitions"`
	// Members are the live members, by ID.
	Members []MemberInfo `json:"members"`
	// Assignment is the stored assignment: Owners[p] is the member that should own p.
	Assignment StoredAssignment `json:"assignment"`
	// Leases has one entry per partition: who actually holds it now.
	Leases []LeaseInfo `json:"leases"`
}

// Balanced reports whether every partition is assigned to a live member that holds its lease:
// the group has converged.
func (s *GroupStatus) Balanced() bool {
	if len(s.Assignment.Owners) != s.Partitions || len(s.Leases) != s.Partitions {
		return false
	}
	live := map[string]bool{}
	for _, m := range s.Members {
		live[m.ID] = true
	}
	for p, o := range s.Assignment.Owners {
		if !live[o] || s.Leases[p].State != LeaseHeld || s.Leases[p].Owner != o {
			return false
		}
	}
	return true
}

// Status reads the state of (topic, group) from KV and the topic's stream. It returns
// jetbus.ErrGroupNotFound when no member ever joined the group, and jetbus.ErrInvalidTopic or
// jetbus.ErrInvalidGroup for bad names.
func Status(ctx context.Context, js KV, topic, group string) (*GroupStatus, error) {
	if err := validTopicGroup(topic, group); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, GroupBucket(group))
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s", jetbus.ErrGroupNotFound, group)
	}
	if err != nil {
		return nil, fmt.Errorf("partition: status: %w", retry.Opaque(err))
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("partition: status: %w", retry.Opaque(err))
	}
	out := &GroupStatus{Topic: topic, Group: group, TTL: st.TTL(), Members: []MemberInfo{}, Leases: []LeaseInfo{}}
	g := &Group{kv: kv, cfg: Config{Topic: topic, Group: group, TTL: st.TTL()}}

	// Members and leases in one pass: the latest entry of every member and lease key of the
	// topic, delete and expiry markers included.
	w, err := kv.WatchFiltered(ctx, []string{MemberKey(topic, "*"), "l." + topic + ".*"})
	if err != nil {
		return nil, fmt.Errorf("partition: status: watch: %w", retry.Opaque(err))
	}
	defer func() { _ = w.Stop() }()
	leases := map[int]LeaseInfo{}
	memberPrefix, leasePrefix := MemberKey(topic, ""), "l."+topic+".p"
	for done := false; !done; {
		var e natsjs.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("partition: status: %w", ctx.Err())
		case e = <-w.Updates():
		}
		switch {
		case e == nil:
			done = true
		case strings.HasPrefix(e.Key(), memberPrefix):
			if e.Operation() != natsjs.KeyValuePut {
				continue
			}
			var info MemberInfo
			if json.Unmarshal(e.Value(), &info) != nil {
				info = MemberInfo{}
			}
			info.ID = strings.TrimPrefix(e.Key(), memberPrefix)
			info.LastSeen = e.Created()
			out.Members = append(out.Members, info)
		case strings.HasPrefix(e.Key(), leasePrefix):
			p, err := strconv.Atoi(strings.TrimPrefix(e.Key(), leasePrefix))
			if err != nil {
				continue
			}
			l := LeaseInfo{Partition: p, Revision: e.Revision()}
			switch e.Operation() {
			case natsjs.KeyValuePut:
				l.State = LeaseHeld
				_ = json.Unmarshal(e.Value(), &l)
				l.Partition = p
			case natsjs.KeyValueDelete:
				l.State = LeaseReleased
			default:
				l.State = LeaseExpired
			}
			leases[p] = l
		}
	}
	slices.SortFunc(out.Members, func(a, b MemberInfo) int { return strings.Compare(a.ID, b.ID) })

	// Assignment.
	if akv, err := js.KeyValue(ctx, AssignmentsBucket); err == nil {
		g.assign = akv
		a, err := g.Assignment(ctx)
		if err != nil {
			return nil, err
		}
		out.Assignment = *a
	} else if !errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, fmt.Errorf("partition: status: %w", retry.Opaque(err))
	}

	// Partition count and leases.
	out.Partitions = len(out.Assignment.Owners)
	if s, err := js.Stream(ctx, jetbus.StreamName(topic)); err == nil {
		if n, err := strconv.Atoi(s.CachedInfo().Config.Metadata[jetbus.MetaPartitions]); err == nil && n > 0 {
			out.Partitions = n
		}
	}
	for p := range out.Partitions {
		l, ok := leases[p]
		if !ok {
			l = LeaseInfo{Partition: p, State: LeaseFree}
		}
		out.Leases = append(out.Leases, l)
	}
	return out, nil
}
