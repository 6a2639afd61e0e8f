package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// MemberInfo is what a member publishes about itself in its member key.
type MemberInfo struct {
	ID      string    `json:"id"`
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Version string    `json:"version,omitempty"`
	Joined  time.Time `json:"joined"`
	// Live is the subject the member answers liveness probes on (LiveSubject), set when its
	// connection was seen to receive and answer them; empty for a member that does not (an
	// older version, or NATS permissions without the subject): it is never probed, and a
	// crash of it is seen when its key expires.
	Live string `json:"live,omitempty"`
	// Reconnect is, for a member with Live, how long its connection takes at most to come
	// back after the server dropped it (its client's reconnect wait and jitter; zero when it
	// cannot tell, e.g. a custom reconnect delay). Probers wait that long, plus a margin,
	// between the two "no responders" that take it for dead (see Timeouts.Confirm).
	Reconnect time.Duration `json:"reconnect,omitempty"`
	// LastSeen is when the member's key was last written (its last heartbeat), from KV.
	LastSeen time.Time `json:"-"`
}

// Membership is this member's presence in its group: a key rewritten every Heartbeat
// interval. Stop it with Leave.
type Membership struct {
	g      *Group
	info   MemberInfo
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error // last heartbeat error
}

// Join writes this member's key and keeps it alive from a goroutine that heartbeats every
// Timeouts().Heartbeat until Leave is called or ctx is done. When ctx is done the key is left
// to expire (TTL) rather than deleted: call Leave for a graceful exit.
func (g *Group) Join(ctx context.Context) (*Membership, error) {
	info := MemberInfo{
		ID:      g.cfg.MemberID,
		Host:    hostname(),
		PID:     os.Getpid(),
		Version: g.cfg.Version,
		Joined:  time.Now().UTC(),
		Live:    g.liveSubject(),
	}
	if info.Live != "" {
		info.Reconnect = time.Duration(g.reconnect.Load())
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	key := MemberKey(g.cfg.Topic, info.ID)
	if _, err := g.kv.Put(ctx, key, b); err != nil {
		return nil, fmt.Errorf("partition: join %s: %w", key, retry.Opaque(err))
	}
	hctx, cancel := context.WithCancel(ctx)
	m := &Membership{g: g, info: info, cancel: cancel, done: make(chan struct{})}
	go m.heartbeat(hctx, key, b)
	return m, nil
}

func (m *Membership) heartbeat(ctx context.Context, key string, value []byte) {
	defer close(m.done)
	t := time.NewTicker(m.g.timeout.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(2*m.g.timeout.Heartbeat, m.g.timeout.Renew))
		_, err := m.g.kv.Put(pctx, key, value)
		cancel()
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			m.g.cfg.Logger.Warn("partition: heartbeat failed", "group", m.g.cfg.Group, "topic", m.g.cfg.Topic, "member", m.info.ID, "err", err)
		}
	}
}

// Info returns what this member published about itself.
func (m *Membership) Info() MemberInfo { return m.info }

// Err returns the error of the last heartbeat (nil when it succeeded).
func (m *Membership) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Leave stops the heartbeats and deletes the member key, so every watcher sees the member go
// at once. It is idempotent; ctx bounds the delete.
func (m *Membership) Leave(ctx context.Context) error {
	m.cancel()
	<-m.done
	err := m.g.kv.Delete(ctx, MemberKey(m.g.cfg.Topic, m.info.ID))
	if err != nil {
		return fmt.Errorf("partition: leave: %w", retry.Opaque(err))
	}
	return nil
}

// MemberOp is what happened to a member.
type MemberOp int

// Member operations seen by WatchMembers.
const (
	// MemberUp: the member joined, or heartbeated (Info.LastSeen moves).
	MemberUp MemberOp = iota + 1
	// MemberLeft: the member left gracefully (its key was deleted).
	MemberLeft
	// MemberExpired: the member was silent for TTL and its key expired.
	MemberExpired
	// MembersSynced: every member present when the watch started has been sent (no ID).
	MembersSynced
)

func (o MemberOp) String() string {
	switch o {
	case MemberUp:
		return "up"
	case MemberLeft:
		return "left"
	case MemberExpired:
		return "expired"
	case MembersSynced:
		return "synced"
	}
	return fmt.Sprintf("MemberOp(%d)", int(o))
}

// MemberEvent is one change of a group's membership.
type MemberEvent struct {
	Op MemberOp
	// ID is the member's ID; Info is set for MemberUp only.
	ID   string
	Info MemberInfo
	// Revision is the KV revision of the change: a watcher that has seen revision R has
	// seen every membership change up to R.
	Revision uint64
}

// MemberWatcher streams the membership of a (topic, group). Stop it when done.
type MemberWatcher struct {
	w      natsjs.KeyWatcher
	events chan MemberEvent
	ready  chan struct{}
	done   chan struct{}
	once   sync.Once
}

// WatchMembers watches the members of (topic, group): first a MemberUp for every current
// member, then a MembersSynced event (and Ready is closed), then every change, including expiry of a silent member
// (MemberExpired). The channel is closed when the watcher stops (Stop, ctx done, or the
// connection closed). The group must exist (jetbus.ErrGroupNotFound).
func WatchMembers(ctx context.Context, js KV, topic, group string) (*MemberWatcher, error) {
	if err := validTopicGroup(topic, group); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, GroupBucket(group))
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s", jetbus.ErrGroupNotFound, group)
	}
	if err != nil {
		return nil, err
	}
	return watchMembers(ctx, kv, topic)
}

func (g *Group) watchMembers(ctx context.Context) (*MemberWatcher, error) {
	return watchMembers(ctx, g.kv, g.cfg.Topic)
}

func watchMembers(ctx context.Context, kv natsjs.KeyValue, topic string) (*MemberWatcher, error) {
	w, err := kv.Watch(ctx, MemberKey(topic, "*"))
	if err != nil {
		return nil, fmt.Errorf("partition: watch members: %w", retry.Opaque(err))
	}
	mw := &MemberWatcher{w: w, events: make(chan MemberEvent, 64), ready: make(chan struct{}), done: make(chan struct{})}
	go mw.run(ctx, topic)
	return mw, nil
}

func (mw *MemberWatcher) run(ctx context.Context, topic string) {
	defer close(mw.events)
	prefix := MemberKey(topic, "")
	readyClosed := false
	for {
		var e natsjs.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			_ = mw.w.Stop()
			return
		case <-mw.done:
			_ = mw.w.Stop()
			return
		case e, ok = <-mw.w.Updates():
			if !ok {
				return
			}
		}
		var ev MemberEvent
		if e == nil {
			if readyClosed {
				continue
			}
			readyClosed = true
			close(mw.ready)
			ev.Op = MembersSynced
		} else {
			ev = mw.entryEvent(e, prefix)
			if !readyClosed && ev.Op != MemberUp {
				continue // a tombstone of the past, not a member
			}
		}
		select {
		case mw.events <- ev:
		case <-ctx.Done():
			_ = mw.w.Stop()
			return
		case <-mw.done:
			_ = mw.w.Stop()
			return
		}
	}
}

func (mw *MemberWatcher) entryEvent(e natsjs.KeyValueEntry, prefix string) MemberEvent {
	ev := MemberEvent{ID: strings.TrimPrefix(e.Key(), prefix), Revision: e.Revision()}
	switch e.Operation() {
	case natsjs.KeyValuePut:
		ev.Op = MemberUp
		if err := json.Unmarshal(e.Value(), &ev.Info); err != nil || ev.Info.ID != ev.ID {
			ev.Info = MemberInfo{ID: ev.ID}
		}
		ev.Info.LastSeen = e.Created()
	case natsjs.KeyValueDelete:
		ev.Op = MemberLeft
	default:
		ev.Op = MemberExpired
	}
	return ev
}

// Events returns the membership changes.
func (mw *MemberWatcher) Events() <-chan MemberEvent { return mw.events }

// Ready is closed once the current members have been sent.
func (mw *MemberWatcher) Ready() <-chan struct{} { return mw.ready }

// Stop stops the watcher. It is idempotent.
func (mw *MemberWatcher) Stop() {
	mw.once.Do(func() { close(mw.done) })
}
