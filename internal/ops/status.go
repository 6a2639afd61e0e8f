package ops

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/streamscan"
	"github.com/jetbus/jetbus/partition"
)

// Status is the report of /v1/ops/status and `bridge status`.
type Status struct {
	// Process is "bridge" or "projector" ("" from the command line).
	Process    string            `json:"process,omitempty"`
	Time       time.Time         `json:"time"`
	Topics     []TopicStatus     `json:"topics"`
	Groups     []GroupStatus     `json:"groups"`
	DLQ        DLQStatus         `json:"dlq"`
	Components []ComponentStatus `json:"components,omitempty"`
}

// TopicStatus is one topic's stream.
type TopicStatus struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	Replicas   int    `json:"replicas"`
	Messages   uint64 `json:"messages"`
	Bytes      uint64 `json:"bytes"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	// Declared is true when the configuration declares the topic; Missing when it does but
	// the stream does not exist.
	Declared bool `json:"declared"`
	Missing  bool `json:"missing,omitempty"`
}

// GroupStatus is one consumer group of one topic.
type GroupStatus struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
	// Partitioned is true for a group of partition.Subscribe members (members, owners and
	// leases below); false for plain Bus subscriptions (positions only).
	Partitioned bool           `json:"partitioned"`
	Members     []MemberStatus `json:"members"`
	// Balanced: every partition is owned by a live member that holds its lease.
	Balanced bool   `json:"balanced"`
	Lag      uint64 `json:"lag"`
	// LagSeconds is the largest of the partitions' LagSeconds.
	LagSeconds float64           `json:"lag_seconds"`
	Partitions []PartitionStatus `json:"partitions"`
	// Error says what could not be read.
	Error string `json:"error,omitempty"`
}

// MemberStatus is a live member of a group.
type MemberStatus struct {
	ID       string    `json:"id"`
	Host     string    `json:"host,omitempty"`
	PID      int       `json:"pid,omitempty"`
	Version  string    `json:"version,omitempty"`
	Joined   time.Time `json:"joined"`
	LastSeen time.Time `json:"last_seen"`
}

// PartitionStatus is a group's state in one partition.
type PartitionStatus struct {
	Partition int `json:"partition"`
	// Owner is the member the stored assignment gives the partition to.
	Owner string `json:"owner,omitempty"`
	// Lease is who holds the partition's lease: held, released, expired or free.
	Lease        string    `json:"lease"`
	LeaseOwner   string    `json:"lease_owner,omitempty"`
	LeaseRenewed time.Time `json:"lease_renewed,omitzero"`
	// Consumer positions (jetbus.PartitionCursor); Consumer is false when the group has no
	// consumer on the partition yet.
	Consumer   bool   `json:"consumer"`
	AckFloor   uint64 `json:"ack_floor"`
	Delivered  uint64 `json:"delivered"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	// Lag is Pending + AckPending: events of the partition the group has not finished.
	Lag uint64 `json:"lag"`
	// LagSeconds is how long the oldest of them has been stored (0 when Lag is 0): how far
	// behind the group is in time (metric jetbus_group_lag_seconds).
	LagSeconds float64 `json:"lag_seconds"`
}

// DLQStatus counts dead letters.
type DLQStatus struct {
	// Exists is false when no DLQ stream was ever created.
	Exists bool   `json:"exists"`
	Total  uint64 `json:"total"`
	// ByTopic counts dead letters per original topic (exact, from the stream's subjects).
	ByTopic map[string]uint64 `json:"by_topic"`
	// ByReason counts them per topic and reason, from the dead letters' headers, read
	// incrementally (DLQCounts); Partial is true while not every letter has been read yet (a
	// status reads at most ScanLimit more).
	ByReason []ReasonCount `json:"by_reason"`
	Partial  bool          `json:"partial,omitempty"`
	// Rejects counts the messages ingress refused, kept apart in their own stream
	// (dlq.RejectsStreamName, within dlq.rejects.max_bytes and max_age); not in Total. By
	// topic they are not counted here: clients choose those subjects, many at will.
	Rejects uint64 `json:"rejects"`
}

// ReasonCount is the number of dead letters of one topic with one reason.
type ReasonCount struct {
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// ScanLimit bounds how many dead letters a status reads for the counts by reason.
const ScanLimit = 100_000

// ComponentStatus is one component of a process.
type ComponentStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Ready is false, with Error saying why, when the component is not ready.
	Ready  bool   `json:"ready"`
	Error  string `json:"error,omitempty"`
	Detail any    `json:"detail,omitempty"`
}

// JetStream is what a status reads: streams, their consumers, KV (partition.Status) and an
// ordered consumer to count dead letters. natsjs.JetStream has it.
type JetStream interface {
	partition.KV
	streamscan.JetStream
	ListStreams(ctx context.Context, opts ...natsjs.StreamListOpt) natsjs.StreamInfoLister
}

// Cursors reads a group's positions (jetstream.Bus has it).
type Cursors interface {
	Cursor(ctx context.Context, topic, group string) (*jetbus.Cursor, error)
}

// Source is where Collect reads.
type Source struct {
	JS     JetStream
	Bus    Cursors
	Topics []string         // declared topics
	Groups []GroupRef       // declared groups (projections)
	Now    func() time.Time // default time.Now
	// DLQ keeps the dead-letter counts between statuses (a process keeps one for its life);
	// nil counts from scratch.
	DLQ *DLQCounts
}

// GroupRef names a group of a topic.
type GroupRef struct{ Topic, Group string }

// Collect reads the status. Errors about one group or the DLQ are reported inside the Status;
// an error is returned only when the streams cannot be listed.
func Collect(ctx context.Context, src Source) (*Status, error) {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	st := &Status{Time: now().UTC().Truncate(time.Second), Topics: []TopicStatus{}, Groups: []GroupStatus{}}
	declared := map[string]bool{}
	for _, t := range src.Topics {
		declared[t] = true
	}
	found := map[string]bool{}
	l := src.JS.ListStreams(ctx)
	for info := range l.Info() {
		name := info.Config.Metadata[jetbus.MetaTopic]
		if name == "" {
			continue
		}
		n, _ := strconv.Atoi(info.Config.Metadata[jetbus.MetaPartitions])
		found[name] = true
		st.Topics = append(st.Topics, TopicStatus{
			Name: name, Partitions: n, Replicas: info.Config.Replicas,
			Messages: info.State.Msgs, Bytes: info.State.Bytes,
			FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
			Declared: declared[name],
		})
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("ops: list streams: %w", err)
	}
	for _, t := range src.Topics {
		if !found[t] {
			st.Topics = append(st.Topics, TopicStatus{Name: t, Declared: true, Missing: true})
		}
	}
	slices.SortFunc(st.Topics, func(a, b TopicStatus) int { return strings.Compare(a.Name, b.Name) })

	groups := map[GroupRef]bool{}
	for _, g := range src.Groups {
		groups[g] = true
	}
	for _, t := range st.Topics {
		if t.Missing {
			continue
		}
		for _, g := range consumerGroups(ctx, src.JS, t.Name) {
			groups[GroupRef{t.Name, g}] = true
		}
	}
	refs := make([]GroupRef, 0, len(groups))
	for g := range groups {
		refs = append(refs, g)
	}
	slices.SortFunc(refs, func(a, b GroupRef) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Group, b.Group)
	})
	for _, g := range refs {
		st.Groups = append(st.Groups, groupStatus(ctx, src, g, now()))
	}
	counts := src.DLQ
	if counts == nil {
		counts = &DLQCounts{}
	}
	st.DLQ = counts.status(ctx, src.JS)
	return st, nil
}

// consumerGroups lists the groups with a partition consumer on topic's stream.
func consumerGroups(ctx context.Context, js JetStream, topic string) []string {
	s, err := js.Stream(ctx, jetbus.StreamName(topic))
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		if g := ci.Config.Metadata["jetbus.group"]; g != "" && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}

func groupStatus(ctx context.Context, src Source, ref GroupRef, now time.Time) GroupStatus {
	gs := GroupStatus{Topic: ref.Topic, Group: ref.Group, Members: []MemberStatus{}, Partitions: []PartitionStatus{}}
	var errs []string
	ps, err := partition.Status(ctx, src.JS, ref.Topic, ref.Group)
	switch {
	case errors.Is(err, jetbus.ErrGroupNotFound):
	case err != nil:
		errs = append(errs, err.Error())
	default:
		gs.Partitioned, gs.Balanced = true, ps.Balanced()
		for _, m := range ps.Members {
			gs.Members = append(gs.Members, MemberStatus{ID: m.ID, Host: m.Host, PID: m.PID, Version: m.Version, Joined: m.Joined, LastSeen: m.LastSeen})
		}
		for p := range ps.Partitions {
			pst := PartitionStatus{Partition: p, Lease: partition.LeaseFree.String()}
			if p < len(ps.Assignment.Owners) {
				pst.Owner = ps.Assignment.Owners[p]
			}
			if p < len(ps.Leases) {
				l := ps.Leases[p]
				pst.Lease = l.State.String()
				if l.State == partition.LeaseHeld {
					pst.LeaseOwner, pst.LeaseRenewed = l.Owner, l.Renewed
				}
			}
			gs.Partitions = append(gs.Partitions, pst)
		}
	}
	cur, err := src.Bus.Cursor(ctx, ref.Topic, ref.Group)
	switch {
	case errors.Is(err, jetbus.ErrGroupNotFound):
	case err != nil:
		errs = append(errs, err.Error())
	default:
		for _, pc := range cur.Partitions {
			for len(gs.Partitions) <= pc.Partition {
				gs.Partitions = append(gs.Partitions, PartitionStatus{Partition: len(gs.Partitions), Lease: partition.LeaseFree.String()})
			}
			p := &gs.Partitions[pc.Partition]
			p.Consumer = true
			p.AckFloor, p.Delivered, p.Pending, p.AckPending = pc.AckFloor, pc.Delivered, pc.Pending, pc.AckPending
			p.Lag = pc.Pending + uint64(pc.AckPending)
			p.LagSeconds = roundSeconds(pc.LagSeconds(now))
			gs.Lag += p.Lag
			gs.LagSeconds = max(gs.LagSeconds, p.LagSeconds)
		}
	}
	gs.Error = strings.Join(errs, "; ")
	return gs
}

// DLQCounts keeps the dead-letter counts by topic and reason between statuses, so that a
// status reads only the letters stored since the one before (at most ScanLimit), not the
// whole DLQ. When letters were removed (replayed, discarded, expired) the counts no longer
// add up to the stream's and are read again from the oldest letter. Safe for concurrent use.
type DLQCounts struct {
	mu     sync.Mutex
	next   uint64 // the stream sequence the next status reads from (0: the start)
	counts map[[2]string]uint64
}

func (c *DLQCounts) status(ctx context.Context, js JetStream) DLQStatus {
	ds := DLQStatus{ByTopic: map[string]uint64{}, ByReason: []ReasonCount{}}
	if rs, err := js.Stream(ctx, dlq.RejectsStreamName); err == nil {
		ds.Rejects = rs.CachedInfo().State.Msgs
	}
	s, err := js.Stream(ctx, dlq.StreamName)
	if err != nil {
		return ds
	}
	ds.Exists = true
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(dlq.SubjectPrefix+">"))
	if err != nil {
		return ds
	}
	ds.Total = info.State.Msgs
	for subj, n := range info.State.Subjects {
		ds.ByTopic[strings.TrimPrefix(subj, dlq.SubjectPrefix)] += n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for pass := 0; pass < 2; pass++ {
		if c.counts == nil || c.sum() > ds.Total { // letters were removed: count again
			c.counts, c.next = map[[2]string]uint64{}, 0
		}
		if ds.Total > 0 && c.next <= info.State.LastSeq {
			c.scan(ctx, js)
		}
		if c.sum() <= ds.Total {
			break
		}
	}
	ds.Partial = c.sum() < ds.Total
	for k, n := range c.counts {
		ds.ByReason = append(ds.ByReason, ReasonCount{Topic: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(ds.ByReason, func(a, b ReasonCount) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return ds
}

// scan counts the letters from c.next on, at most ScanLimit of them.
func (c *DLQCounts) scan(ctx context.Context, js JetStream) {
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{dlq.SubjectPrefix + ">"}, HeadersOnly: true}
	if c.next > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, c.next
	}
	read := 0
	_ = streamscan.Scan(ctx, js, dlq.StreamName, cfg, func(m natsjs.Msg, md *natsjs.MsgMetadata) bool {
		c.counts[[2]string{strings.TrimPrefix(m.Subject(), dlq.SubjectPrefix), m.Headers().Get(dlq.HeaderReason)}]++
		c.next = md.Sequence.Stream + 1
		read++
		return read < ScanLimit
	})
}

func (c *DLQCounts) sum() uint64 {
	var n uint64
	for _, v := range c.counts {
		n += v
	}
	return n
}

// roundSeconds keeps milliseconds: a lag in time is read in seconds, not nanoseconds.
func roundSeconds(s float64) float64 { return math.Round(s*1000) / 1000 }
