package partition_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// recorder is the instrumented handler shared by every member of a churn test.
type recorder struct {
	mu       sync.Mutex
	active   map[int]string // partition -> member inside the handler
	overlaps []string
	handled  map[uint64]bool // stream sequences handled at least once
	lastSeq  map[string]uint64
	disorder []string
	wrong    []string
	count    atomic.Int64 // distinct events handled
}

func newRecorder() *recorder {
	return &recorder{active: map[int]string{}, handled: map[uint64]bool{}, lastSeq: map[string]uint64{}}
}

func (r *recorder) handler(member, topic string, work time.Duration) jetbus.Handler {
	return func(ctx context.Context, d *jetbus.Delivery) error {
		p := d.Partition
		r.mu.Lock()
		if other, busy := r.active[p]; busy {
			r.overlaps = append(r.overlaps, fmt.Sprintf("partition %d in %s and %s at once (seq %d)", p, other, member, d.Seq))
		}
		r.active[p] = member
		if d.Topic != topic || jetbus.PartitionOf(d.Key, 16) != p {
			r.wrong = append(r.wrong, fmt.Sprintf("event seq %d: topic %q partition %d key %q", d.Seq, d.Topic, p, d.Key))
		}
		if !r.handled[d.Seq] {
			if last := r.lastSeq[d.Key]; d.Seq < last {
				r.disorder = append(r.disorder, fmt.Sprintf("key %s: seq %d handled after %d (member %s, attempt %d)", d.Key, d.Seq, last, member, d.Attempt))
			}
			r.handled[d.Seq] = true
			r.lastSeq[d.Key] = max(r.lastSeq[d.Key], d.Seq)
			r.count.Add(1)
		}
		r.mu.Unlock()
		if work > 0 {
			time.Sleep(work) // simulated work: widens the window in which an overlap would show
		}
		r.mu.Lock()
		delete(r.active, p)
		r.mu.Unlock()
		return nil
	}
}

// churnEnv runs members of one group against a server or cluster.
type churnEnv struct {
	t        *testing.T
	url      string
	topic    string
	group    string
	ttl      time.Duration
	replicas int
	rec      *recorder
	work     time.Duration
	members  map[string]*churnMember
}

var churnOpts = []jetbus.SubscribeOption{jetbus.FromEarliest(), jetbus.AckTimeout(2 * time.Second), jetbus.BatchSize(50)}

type churnMember struct {
	nc  *nats.Conn
	bus *jbjs.Bus
	sub *partition.Subscriber
}

func (e *churnEnv) start(id string) *churnMember {
	e.t.Helper()
	bus := embeddedtest.Bus(e.t, e.url)
	nc := bus.Conn()
	sub, err := partition.Subscribe(e.t.Context(), bus, bus.JetStream(), partition.Config{
		Topic: e.topic, Group: e.group, MemberID: id, TTL: e.ttl, Replicas: e.replicas, Logger: embeddedtest.Logger(e.t),
	}, e.rec.handler(id, e.topic, e.work), churnOpts...)
	require.NoError(e.t, err)
	m := &churnMember{nc: nc, bus: bus, sub: sub}
	e.members[id] = m
	e.t.Cleanup(func() { _ = sub.Stop() })
	return m
}

func TestChurnSingleNode(t *testing.T) {
	s := embeddedtest.NATS(t)
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	// A short TTL, to churn through lease losses and expiries quickly; not shorter: with a
	// 1 s TTL (renewals due within 800 ms), a machine loaded several times over by other
	// suites lost leases faster than the members could serve them, and nothing moved.
	runChurn(t, s.ClientURL(), 1, 2*time.Second, nil, total)
}

// TestChurnCluster runs the churn on a 3-node cluster with 100,000 events (10,000 with
// -short), one server stopped and restarted mid-run. The server stop interrupts pulls; the Bus
// then returns what was lost in flight before resuming, so per-key order holds across it. The
// consumer state is dumped when the test fails.
func TestChurnCluster(t *testing.T) {
	c := embeddedtest.Cluster(t, 3)
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	runChurn(t, c.URLs(), 3, partition.DefaultTTL, c, total)
}

// runChurn publishes keyed events to a 16-partition topic while members join, leave
// gracefully and are killed (their connection closed: no leave, no release), and checks that
// every event is handled, per-key order holds, and no partition is ever in two members'
// handlers at once. With a cluster, one server is stopped and restarted mid-run.
func runChurn(t *testing.T, url string, replicas int, ttl time.Duration, cluster *embeddedtest.ClusterT, total int) {
	const keys = 500
	admin := embeddedtest.Bus(t, url)
	ctx := t.Context()
	require.NoError(t, admin.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 16, Replicas: replicas}))
	env := &churnEnv{t: t, url: url, topic: "orders", group: "billing", ttl: ttl, replicas: replicas, rec: newRecorder(), work: 0, members: map[string]*churnMember{}}
	// Create the group's 16 durable consumers once, with the members' options, so that the
	// members' first subscriptions find them (creating R3 consumers is slow on a busy cluster).
	warm, err := admin.Subscribe(ctx, "orders", "billing", func(context.Context, *jetbus.Delivery) error { return nil }, churnOpts...)
	require.NoError(t, err)
	require.NoError(t, warm.Stop())

	// Publisher: its own connection, paced in chunks so that churn happens while events flow.
	// A publish that fails (a server stopping) is retried with the same event ID, which the
	// stream's duplicate window stores once.
	var published atomic.Int64
	pubDone := make(chan error, 1)
	go func() {
		pub := embeddedtest.Bus(t, url)
		publishOne := func(j int) error {
			for {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := pub.Publish(pctx, "orders", map[string]int{"n": j}, jetbus.WithKey("k"+strconv.Itoa(j%keys)), jetbus.WithID("e-"+strconv.Itoa(j)))
				cancel()
				if err == nil || ctx.Err() != nil {
					return ctx.Err()
				}
				t.Logf("publish %d failed, retrying: %v", j, err)
			}
		}
		const chunk = 500
		for i := 0; i < total; i += chunk {
			futs := make(map[int]jetbus.PublishFuture, chunk)
			for j := i; j < min(i+chunk, total); j++ {
				f, err := pub.PublishAsync(ctx, "orders", map[string]int{"n": j}, jetbus.WithKey("k"+strconv.Itoa(j%keys)), jetbus.WithID("e-"+strconv.Itoa(j)))
				if err != nil {
					if err := publishOne(j); err != nil {
						pubDone <- err
						return
					}
					continue
				}
				futs[j] = f
			}
			// An ack lost with a stopped server never comes: bound the wait for the chunk.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			for j := i; j < min(i+chunk, total); j++ {
				if f := futs[j]; f != nil {
					if _, err := f.Wait(wctx); err != nil {
						if err := publishOne(j); err != nil {
							cancel()
							pubDone <- err
							return
						}
					}
				}
			}
			cancel()
			published.Add(int64(min(chunk, total-i)))
			// Keep the publisher at most a few chunks ahead of the consumers.
			for published.Load()-env.rec.count.Load() > int64(total/10) {
				select {
				case <-ctx.Done():
					pubDone <- ctx.Err()
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		pubDone <- nil
	}()

	progress := func(frac float64) {
		t.Helper()
		if !assert.Eventually(t, func() bool { return env.rec.count.Load() >= int64(frac*float64(total)) },
			60*time.Second, 10*time.Millisecond, "handled %d of %d", env.rec.count.Load(), total) {
			dumpConsumers(t, admin, "orders", "billing", 16)
			t.FailNow()
		}
	}
	status := func(want int) {
		t.Helper()
		start := time.Now()
		var last *partition.GroupStatus
		var lastErr error
		ok := assert.Eventually(t, func() bool {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			last, lastErr = partition.Status(sctx, admin.JetStream(), "orders", "billing")
			return lastErr == nil && len(last.Members) == want && len(last.Assignment.Members) == want && last.Balanced()
		}, 60*time.Second, 20*time.Millisecond, "group did not converge to %d members", want)
		if !ok {
			b, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("last status (err %v): %s", lastErr, b)
		}
		t.Logf("converged to %d members in %s (handled %d)", want, time.Since(start), env.rec.count.Load())
	}

	env.start("m1")
	env.start("m2")
	env.start("m3")
	status(3)
	progress(0.15)

	env.start("m4") // join
	status(4)
	progress(0.30)

	env.members["m2"].nc.Close() // kill: no leave, no release, just silence
	status(3)
	progress(0.45)

	victim := -1
	if cluster != nil {
		victim = cluster.StreamLeader(jetbusAccount, jetbus.StreamName("orders"))
		if victim < 0 {
			victim = 1
		}
		cluster.Stop(victim)
		progress(0.55)
	}

	env.start("m5") // join
	status(4)
	progress(0.65)
	if cluster != nil {
		cluster.Restart(victim)
	}

	require.NoError(t, env.members["m1"].sub.Stop()) // graceful leave
	status(3)

	if !assert.Eventually(t, func() bool { return env.rec.count.Load() == int64(total) }, 90*time.Second, 20*time.Millisecond,
		"handled %d of %d events", env.rec.count.Load(), total) {
		dumpConsumers(t, admin, "orders", "billing", 16)
		t.FailNow()
	}
	require.NoError(t, <-pubDone)

	for id, m := range env.members {
		if id != "m2" {
			assert.NoError(t, m.sub.Stop(), "stop %s", id)
		}
	}
	env.rec.mu.Lock()
	defer env.rec.mu.Unlock()
	assert.Empty(t, env.rec.overlaps, "a partition was in two members' handlers at once")
	assert.Empty(t, env.rec.disorder, "per-key order broken")
	assert.Empty(t, env.rec.wrong, "handler saw a wrong topic or partition")
	assert.Len(t, env.rec.handled, total)
}

const jetbusAccount = "$G"

// dumpConsumers logs the state of a group's partition consumers, to tell a stalled consumer
// from a stalled member when a churn test fails.
func dumpConsumers(t *testing.T, bus *jbjs.Bus, topic, group string, n int) {
	t.Helper()
	for p := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cons, err := bus.JetStream().Consumer(ctx, jetbus.StreamName(topic), fmt.Sprintf("%s_p%d", group, p))
		cancel()
		if err != nil {
			t.Logf("partition %d: %v", p, err)
			continue
		}
		ci := cons.CachedInfo()
		var pins []string
		for _, g := range ci.PriorityGroups {
			pins = append(pins, g.Group+"="+g.PinnedClientID)
		}
		leader := "" // none on a single server
		if ci.Cluster != nil {
			leader = ci.Cluster.Leader
		}
		t.Logf("partition %d: pending %d ack-pending %d redelivered %d waiting %d delivered %d ack-floor %d leader %s pins %v",
			p, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream, leader, pins)
	}
}
