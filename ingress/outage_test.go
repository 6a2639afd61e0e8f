package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// restartable is a single JetStream server that a test can stop and start again on the same
// port and store.
type restartable struct {
	t    *testing.T
	mu   sync.Mutex
	opts *server.Options
	srv  *server.Server
	url  string
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{t: t, opts: embeddedtest.ServerOptions(t.TempDir())}
	s, err := embeddedtest.StartServer(r.opts.Clone())
	require.NoError(t, err)
	r.srv = s
	r.opts.Port = s.Addr().(*net.TCPAddr).Port
	r.url = s.ClientURL()
	t.Cleanup(func() {
		if s := r.server(); s != nil {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	return r
}

func (r *restartable) server() *server.Server { r.mu.Lock(); defer r.mu.Unlock(); return r.srv }

func (r *restartable) stop() {
	r.mu.Lock()
	s := r.srv
	r.srv = nil
	r.mu.Unlock()
	s.Shutdown()
	s.WaitForShutdown()
}

func (r *restartable) start() {
	s, err := embeddedtest.StartServer(r.opts.Clone())
	require.NoError(r.t, err)
	r.mu.Lock()
	r.srv = s
	r.mu.Unlock()
}

// outcomes counts what a requesting client saw.
type outcomes struct {
	ok, unavailable, noAnswer, other atomic.Int64
	mu                               sync.Mutex
	acked                            map[string]uint64 // event ID → seq, as answered
	otherCodes                       []string
	sent                             []string // fire-and-forget IDs sent
}

// requester is a well-behaved client: it requests {"n": i} with Nats-Msg-Id "r-<i>", retries
// the same ID after unavailable or no answer until it is stored, and after each stored one
// publishes one fire-and-forget message "f-<i>".
func requester(ctx context.Context, nc *nats.Conn, o *outcomes) {
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("r-%d", i)
		for ctx.Err() == nil {
			m := nats.NewMsg("in.orders")
			m.Data = fmt.Appendf(nil, `{"n":%d}`, i)
			m.Header.Set(jetbus.HeaderMsgID, id)
			resp, err := nc.RequestMsg(m, time.Second)
			if err != nil {
				o.noAnswer.Add(1) // a timeout, or no responders while ingress reconnects
			} else if code := resp.Header.Get("Nats-Service-Error"); code != "" {
				var r errReply
				_ = json.Unmarshal(resp.Data, &r)
				if r.Error.Code == "unavailable" {
					o.unavailable.Add(1)
				} else {
					o.other.Add(1)
					o.mu.Lock()
					o.otherCodes = append(o.otherCodes, string(resp.Data))
					o.mu.Unlock()
				}
			} else {
				var r okReply
				if json.Unmarshal(resp.Data, &r) == nil && r.ID == id {
					o.ok.Add(1)
					o.mu.Lock()
					o.acked[id] = r.Seq
					o.mu.Unlock()
					break
				}
				o.other.Add(1)
			}
			select { // a client's pause before retrying
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			return
		}
		f := fmt.Sprintf("f-%d", i)
		m := nats.NewMsg("in.orders")
		m.Data = fmt.Appendf(nil, `{"n":%d}`, -i-1)
		m.Header.Set(jetbus.HeaderMsgID, f)
		if nc.PublishMsg(m) == nil {
			o.mu.Lock()
			o.sent = append(o.sent, f)
			o.mu.Unlock()
		}
	}
}

// TestJetStreamUnavailable: JetStream goes away for a while — the whole server stopped and
// started again on the same port and store, or a 3-node cluster losing its quorum (two nodes
// stopped) while clients and ingress stay connected to the third — as a client requests and
// publishes. Requests are answered unavailable or wait; ingress never holds more than
// max_in_flight; every request answered as stored is stored, every ID once; and when core
// NATS stayed up, every fire-and-forget message is stored too.
func TestJetStreamUnavailable(t *testing.T) {
	type outage struct {
		srv      *server.Server
		url      string
		replicas int
		down, up func()
	}
	cases := []struct {
		name          string
		start         func(t *testing.T) outage
		allFireForget bool // core NATS kept running, so no fire-and-forget message can be lost
		failures      int64
	}{
		{"server restarted", func(t *testing.T) outage {
			r := startRestartable(t)
			return outage{srv: r.server(), url: r.url, replicas: 1, down: r.stop, up: r.start}
		}, false, 3},
		{"cluster lost its quorum", func(t *testing.T) outage {
			if testing.Short() {
				t.Skip("a 3-node cluster: not in -short")
			}
			c := embeddedtest.Cluster(t, 3)
			s := c.Servers()[0]
			return outage{srv: s, url: s.ClientURL(), replicas: 3,
				down: func() { c.Stop(1); c.Stop(2) }, up: func() { c.Restart(1); c.Restart(2) }}
		}, true, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.start(t)
			e := newEnvOn(t, o.srv, o.url, jbjs.TopicConfig{Name: "orders", Partitions: 2, Replicas: o.replicas})
			const maxInFlight = 16
			g := e.run(ingress.Config{Allow: []string{"orders"}, MaxInFlight: maxInFlight, AckTimeout: 500 * time.Millisecond})
			nc := client(t, o.url)

			var maxHeld atomic.Int64
			sample := func() {
				if n := int64(g.Stats().InFlight); n > maxHeld.Load() {
					maxHeld.Store(n)
				}
			}
			oc := &outcomes{acked: map[string]uint64{}}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { requester(ctx, nc, oc) })
			defer func() { cancel(); wg.Wait() }()

			require.Eventually(t, func() bool { sample(); return oc.ok.Load() >= 20 }, wait, time.Millisecond, "requests stored")
			o.down()
			before := oc.unavailable.Load() + oc.noAnswer.Load()
			require.Eventually(t, func() bool { sample(); return oc.unavailable.Load()+oc.noAnswer.Load() >= before+tc.failures },
				wait, time.Millisecond, "requests are answered unavailable, or wait, while JetStream is away")
			okDown := oc.ok.Load()
			o.up()
			require.Eventually(t, func() bool { sample(); return oc.ok.Load() >= okDown+20 }, wait, time.Millisecond,
				"requests are stored again once JetStream is back")
			cancel()
			wg.Wait()

			assert.LessOrEqual(t, maxHeld.Load(), int64(maxInFlight), "ingress holds at most max_in_flight")
			assert.Zero(t, oc.other.Load(), "only stored, unavailable or no answer: %v", oc.otherCodes)
			if tc.allFireForget {
				assert.Positive(t, oc.unavailable.Load(), "the breaker answers at once")
			}
			oc.mu.Lock()
			defer oc.mu.Unlock()
			// Wait for the fire-and-forget messages ingress holds (retries) to be stored.
			want := len(oc.acked)
			if tc.allFireForget {
				want += len(oc.sent)
			}
			require.Eventually(t, func() bool { return e.count("orders") >= uint64(want) }, wait, 10*time.Millisecond)
			ids := e.ids("orders")
			for id, seq := range oc.acked {
				assert.Equal(t, []uint64{seq}, ids[id], "request %s: stored once, where the reply said", id)
			}
			for id, seqs := range ids {
				assert.Len(t, seqs, 1, "event %s stored once", id)
			}
			if tc.allFireForget {
				for _, id := range oc.sent {
					assert.Len(t, ids[id], 1, "fire-and-forget %s stored", id)
				}
			}
			st := g.Stats()
			assert.Zero(t, st.Abandoned)
			assert.Zero(t, st.Dropped)
			assert.False(t, st.JetStreamUnavailable)
			t.Logf("ok %d, unavailable %d, no answer %d, fire-and-forget %d, stored %d",
				oc.ok.Load(), oc.unavailable.Load(), oc.noAnswer.Load(), len(oc.sent), len(ids))
		})
	}
}
