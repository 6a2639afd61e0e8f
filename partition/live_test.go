package partition_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// The liveness tests run member "a" as a process of its own (the test binary re-executed, see
// proc_test.go), so that it can be SIGKILLed, paused with SIGSTOP as a long GC pause would, or
// have its connection cut, and member "b" in the test, both with the default TTL. The topic
// has 4 partitions: a and b own 2 each.

const (
	liveTopic = "orders"
	liveGroup = "views"
	liveParts = 4
)

type liveEnv struct {
	t     *testing.T
	admin *jbjs.Bus
	a     *embeddedtest.Process
	b     *partition.Subscriber

	mu    sync.Mutex
	first map[int]time.Time // partition -> b's first delivery of it
}

// newLiveEnv starts a (connected to the first of childURLs first, reconnecting as the
// processes do) and b (on bURL), and waits until each owns half of the partitions.
func newLiveEnv(t *testing.T, adminURL, childURLs, bURL string, replicas int, fenced bool) *liveEnv {
	return newLiveEnvReconnect(t, adminURL, childURLs, bURL, replicas, fenced, 0)
}

// newLiveEnvReconnect is newLiveEnv with a's ReconnectWait (0: the processes').
func newLiveEnvReconnect(t *testing.T, adminURL, childURLs, bURL string, replicas int, fenced bool, reconnectWait time.Duration) *liveEnv {
	t.Helper()
	ctx := t.Context()
	e := &liveEnv{t: t, admin: embeddedtest.Bus(t, adminURL), first: map[int]time.Time{}}
	require.NoError(t, e.admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: liveTopic, Partitions: liveParts, Replicas: replicas}))
	e.a = startMemberProcess(t, childSpec{URLs: childURLs, Member: "a", Topic: liveTopic, Group: liveGroup, Fenced: fenced, Replicas: replicas, ReconnectWait: reconnectWait})
	e.waitBalanced(1)
	bus := embeddedtest.Bus(t, bURL)
	sub, err := partition.Subscribe(ctx, bus, bus.JetStream(), partition.Config{
		Topic: liveTopic, Group: liveGroup, MemberID: "b", Replicas: replicas, Fenced: fenced, Logger: embeddedtest.Logger(t),
	}, func(_ context.Context, d *jetbus.Delivery) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, ok := e.first[d.Partition]; !ok {
			e.first[d.Partition] = time.Now()
		}
		return nil
	}, jetbus.FromEarliest())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	e.b = sub
	e.waitBalanced(2)
	return e
}

func (e *liveEnv) status() *partition.GroupStatus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
	defer cancel()
	st, err := partition.Status(ctx, e.admin.JetStream(), liveTopic, liveGroup)
	require.NoError(e.t, err)
	return st
}

func (e *liveEnv) waitBalanced(members int) {
	e.t.Helper()
	var last *partition.GroupStatus
	ok := embeddedtest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
		defer cancel()
		st, err := partition.Status(ctx, e.admin.JetStream(), liveTopic, liveGroup)
		if err != nil {
			return false
		}
		last = st
		return len(st.Members) == members && len(st.Assignment.Members) == members && st.Balanced()
	})
	require.True(e.t, ok, "the group did not settle with %d members: %+v", members, last)
}

// leasesOf returns the leases member holds, by partition.
func (e *liveEnv) leasesOf(member string) map[int]partition.LeaseInfo {
	e.t.Helper()
	out := map[int]partition.LeaseInfo{}
	for _, l := range e.status().Leases {
		if l.State == partition.LeaseHeld && l.Owner == member {
			out[l.Partition] = l
		}
	}
	require.Len(e.t, out, liveParts/2, "each member owns half of the partitions")
	return out
}

// publishTo publishes one event to each of the partitions.
func (e *liveEnv) publishTo(parts map[int]partition.LeaseInfo) {
	e.t.Helper()
	for p := range parts {
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("k%d", i); jetbus.PartitionOf(k, liveParts) == p {
				key = k
			}
		}
		_, err := e.admin.Publish(e.t.Context(), liveTopic, map[string]int{"p": p}, jetbus.WithKey(key))
		require.NoError(e.t, err)
	}
}

func (e *liveEnv) firstDelivery(p int) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.first[p]
}

// TestCrashedMemberResumesWithinThreeSeconds: a member is SIGKILLed (no release, no leave).
// In a fenced group its partitions are handled again by the other member within 3 s, with the
// default TTL: before the killed member's leases could have expired, so because the server
// reported its connection gone. An unfenced group still waits for the leases to expire.
func TestCrashedMemberResumesWithinThreeSeconds(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "unfenced"}[fenced], func(t *testing.T) {
			s := embeddedtest.NATS(t)
			e := newLiveEnv(t, s.ClientURL(), s.ClientURL(), s.ClientURL(), 1, fenced)
			held := e.leasesOf("a")

			killed := time.Now()
			e.a.Kill()
			// Publish once the server has dropped a's connection: an event published before
			// it noticed would go to a's pending pull request and come back only after the
			// ack wait, in either kind of group — a matter of the event, not of the partition.
			require.True(t, embeddedtest.Poll(5*time.Second, 5*time.Millisecond, func() bool { return !connected(t, s, "a") }),
				"the server still has a's connection 5s after the kill")
			e.publishTo(held)
			within := 3 * time.Second
			if !fenced {
				within = 2 * partition.DefaultTTL
			}
			embeddedtest.Poll(within, 10*time.Millisecond, func() bool {
				for p := range held {
					if e.firstDelivery(p).IsZero() {
						return false
					}
				}
				return true
			})
			_, _, _, removed := partition.ProbeCounts(e.b)
			assert.Positive(t, removed, "b removed the killed member once the server reported it gone")
			for p, l := range held {
				at := e.firstDelivery(p)
				require.False(t, at.IsZero(), "partition %d not handled within %s of the kill", p, within)
				// a's lease cannot expire on the server before it was last renewed plus the TTL.
				expiry := l.Renewed.Add(partition.DefaultTTL)
				t.Logf("partition %d handled by b %s after the kill; a's lease would expire %s after it",
					p, at.Sub(killed).Round(time.Millisecond), expiry.Sub(killed).Round(time.Millisecond))
				if fenced {
					assert.LessOrEqual(t, at.Sub(killed), 3*time.Second, "partition %d", p)
					assert.True(t, at.Before(expiry), "partition %d taken over before a's lease could expire", p)
				} else {
					assert.False(t, at.Before(expiry), "unfenced: partition %d waits for a's lease to expire", p)
				}
			}
		})
	}
}

// watchKept records, until the test ends, whether member a ever leaves the member list (left,
// expired or removed) and whether b ever owns one of a's partitions, and hands out a's
// heartbeats as they are seen.
type watchKept struct {
	departed   atomic.Bool
	stolen     atomic.Value // string: what b owned
	heartbeats chan time.Time
}

func (e *liveEnv) watchKept(parts map[int]partition.LeaseInfo) *watchKept {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := partition.WatchMembers(ctx, e.admin.JetStream(), liveTopic, liveGroup)
	require.NoError(e.t, err)
	k := &watchKept{heartbeats: make(chan time.Time, 64)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range w.Events() {
			if ev.ID != "a" {
				continue
			}
			switch ev.Op {
			case partition.MemberUp:
				select {
				case k.heartbeats <- time.Now():
				default:
				}
			case partition.MemberLeft, partition.MemberExpired:
				k.departed.Store(true)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, p := range e.b.Owned() {
				if _, ok := parts[p]; ok {
					k.stolen.Store(fmt.Sprintf("b owned partition %d of a's", p))
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		w.Stop()
		wg.Wait()
	})
	return k
}

// beforeHeartbeat waits for a's next heartbeat and returns shortly before the one after it is
// due: a fault from then on keeps a silent for longest.
func (k *watchKept) beforeHeartbeat(t *testing.T) {
	t.Helper()
	for len(k.heartbeats) > 0 {
		<-k.heartbeats
	}
	select {
	case <-k.heartbeats:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat of a")
	}
	time.Sleep(partition.Config{}.Timeouts().Heartbeat - 100*time.Millisecond)
}

// assertKept checks that a kept its partitions: it never left the member list, b never owned
// them, and a still holds the leases it held before (the same acquisitions).
func (e *liveEnv) assertKept(k *watchKept, before map[int]partition.LeaseInfo) {
	e.t.Helper()
	assert.False(e.t, k.departed.Load(), "member a left the member list")
	if s, _ := k.stolen.Load().(string); s != "" {
		assert.Fail(e.t, s)
	}
	after := e.leasesOf("a")
	for p, l := range before {
		assert.True(e.t, l.Acquired.Equal(after[p].Acquired), "a's lease of partition %d was taken again (acquired %s, then %s)", p, l.Acquired, after[p].Acquired)
	}
}

// TestPausedMemberKeepsItsPartitions: a member stopped for 1 s (SIGSTOP, as a long GC pause
// would: its connection stays, nothing answers) three times, each just before its heartbeat
// was due, keeps its partitions: the other member's probes go unanswered, which is no proof of
// death.
func TestPausedMemberKeepsItsPartitions(t *testing.T) {
	s := embeddedtest.NATS(t)
	e := newLiveEnv(t, s.ClientURL(), s.ClientURL(), s.ClientURL(), 1, true)
	before := e.leasesOf("a")
	k := e.watchKept(before)
	for range 3 {
		k.beforeHeartbeat(t)
		require.NoError(t, e.a.Signal(syscall.SIGSTOP))
		time.Sleep(time.Second)
		require.NoError(t, e.a.Signal(syscall.SIGCONT))
		time.Sleep(2 * time.Second)
	}
	e.assertKept(k, before)
	answered, noAnswer, gone, removed := partition.ProbeCounts(e.b)
	t.Logf("b's probes of a: %d answered, %d unanswered, %d no responders; %d removals", answered, noAnswer, gone, removed)
	assert.Positive(t, noAnswer, "b probed a while it was stopped")
	assert.Zero(t, gone)
	assert.Zero(t, removed)
}

// TestReconnectingMemberKeepsItsPartitions: a member whose connection is cut, and which
// reconnects, keeps its partitions: the server kicks it three times, each just before its
// heartbeat was due, and it reconnects after 250–350 ms as the processes do (ReconnectWait
// and jitter), or after 2–2.1 s as a nats.go connection with the defaults does (longer than
// the 1.25 s ConfirmWindow: its probers wait what it advertises); or the node it is
// connected to restarts and it moves to another node of the cluster.
func TestReconnectingMemberKeepsItsPartitions(t *testing.T) {
	t.Run("kicked, nats.go's reconnect wait", func(t *testing.T) {
		s := embeddedtest.NATS(t)
		e := newLiveEnvReconnect(t, s.ClientURL(), s.ClientURL(), s.ClientURL(), 1, true, 2*time.Second)
		var info partition.MemberInfo
		for _, m := range e.status().Members {
			if m.ID == "a" {
				info = m
			}
		}
		assert.Equal(t, 2*time.Second+100*time.Millisecond, info.Reconnect, "a advertises its reconnect wait plus jitter")
		before := e.leasesOf("a")
		k := e.watchKept(before)
		for range 2 {
			k.beforeHeartbeat(t)
			kick(t, s, "a")
			require.True(t, embeddedtest.Poll(10*time.Second, 10*time.Millisecond, func() bool { return connected(t, s, "a") }), "a reconnects")
			time.Sleep(2 * time.Second)
		}
		e.assertKept(k, before)
		answered, noAnswer, gone, removed := partition.ProbeCounts(e.b)
		t.Logf("b's probes of a: %d answered, %d unanswered, %d no responders; %d removals", answered, noAnswer, gone, removed)
		assert.Positive(t, gone, "b found a gone while it reconnected")
		assert.Zero(t, removed)
	})
	t.Run("kicked", func(t *testing.T) {
		s := embeddedtest.NATS(t)
		e := newLiveEnv(t, s.ClientURL(), s.ClientURL(), s.ClientURL(), 1, true)
		before := e.leasesOf("a")
		k := e.watchKept(before)
		for range 3 {
			k.beforeHeartbeat(t)
			kick(t, s, "a")
			time.Sleep(3 * time.Second)
		}
		e.assertKept(k, before)
		answered, noAnswer, gone, removed := partition.ProbeCounts(e.b)
		t.Logf("b's probes of a: %d answered, %d unanswered, %d no responders; %d removals", answered, noAnswer, gone, removed)
		assert.Positive(t, gone, "b found a gone while it reconnected, once at least")
		assert.Zero(t, removed)
	})
	t.Run("node restart", func(t *testing.T) {
		c := embeddedtest.Cluster(t, 3)
		ctx := t.Context()
		// The group's bucket first, to restart a node that does not lead it: a restart of its
		// leader stops every renewal for an election, which is another matter.
		_, err := partition.OpenGroup(ctx, jetStream(t, c.URLs()), partition.Config{Topic: liveTopic, Group: liveGroup, Replicas: 3})
		require.NoError(t, err)
		kvLeader := c.StreamLeader(jetbusAccount, "KV_"+partition.GroupBucket(liveGroup))
		meta := c.MetaLeader()
		x := -1
		for i := range 3 {
			if i != kvLeader && i != meta {
				x = i
			}
		}
		for i := 0; x < 0; i++ {
			if i != kvLeader {
				x = i
			}
		}
		y := (x + 1) % 3
		servers := c.Servers()
		childURLs := servers[x].ClientURL() + "," + servers[y].ClientURL() + "," + servers[(x+2)%3].ClientURL()
		e := newLiveEnv(t, servers[y].ClientURL(), childURLs, servers[y].ClientURL(), 3, true)
		require.True(t, connected(t, servers[x], "a"), "a is connected to node %d", x)
		before := e.leasesOf("a")
		k := e.watchKept(before)

		c.Stop(x)
		time.Sleep(3 * time.Second)
		c.Restart(x)
		time.Sleep(3 * time.Second)
		e.assertKept(k, before)
		answered, noAnswer, gone, removed := partition.ProbeCounts(e.b)
		t.Logf("node %d restarted (group bucket leader %d, meta leader %d); b's probes of a: %d answered, %d unanswered, %d no responders; %d removals",
			x, kvLeader, meta, answered, noAnswer, gone, removed)
		assert.Zero(t, removed)
	})
}

// connected reports whether a client named name is connected to s.
func connected(t *testing.T, s *server.Server, name string) bool {
	t.Helper()
	cz, err := s.Connz(&server.ConnzOptions{})
	require.NoError(t, err)
	return slices.ContainsFunc(cz.Conns, func(c *server.ConnInfo) bool { return c.Name == name })
}

// kick closes the connection of the client named name on the server's side; the client
// reconnects.
func kick(t *testing.T, s *server.Server, name string) {
	t.Helper()
	cz, err := s.Connz(&server.ConnzOptions{})
	require.NoError(t, err)
	for _, c := range cz.Conns {
		if c.Name == name {
			require.NoError(t, s.DisconnectClientByID(c.Cid))
			return
		}
	}
	t.Fatalf("no connection named %s", name)
}
