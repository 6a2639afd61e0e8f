//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// The scenarios of make e2e: each runs the six processes (two bridges, two projectors, two
// counters) under JETBUS_E2E_SECONDS (default
// 60) of load at JETBUS_E2E_RATE events/s through ingress (default 100) plus a third as many
// through the Bus, applies its fault while the load runs, then checks every invariant.

func scenario(t *testing.T, name string) (*stack, *load) {
	t.Helper()
	if !nodeInstalled() {
		t.Fatal("the Node client is not installed: run make e2e-node (make e2e does)")
	}
	s := newStack(t)
	s.start()
	s.writeCustomers(t, name, 20)
	return s, s.startLoad(t, name, envInt("JETBUS_E2E_SECONDS", 60), envInt("JETBUS_E2E_RATE", 100))
}

func (s *stack) finishScenario(t *testing.T, ld *load, name string) {
	t.Helper()
	fig := ld.finish(4 * time.Minute)
	s.checkAll(t, ld.l)
	s.checkCustomers(t)
	s.checkETag(t, ld.l)
	report(t, name, fig)
}

// TestQuiet: the baseline figures, no fault.
func TestQuiet(t *testing.T) {
	s, ld := scenario(t, "quiet")
	s.finishScenario(t, ld, "quiet")
}

// TestProjectorKills: a projector and a counter (the transactional projection) are SIGKILLed
// mid-batch ten times each, each replaced at once.
func TestProjectorKills(t *testing.T) {
	s, ld := scenario(t, "pkill")
	for i := range 10 {
		ld.waitProgress(0.05+0.09*float64(i), 2*time.Minute)
		for _, kind := range []string{"projector", "counter"} {
			ps := s.running(kind)
			require.NotEmpty(t, ps)
			ps[i%len(ps)].Kill()
			s.startProc(kind)
		}
	}
	s.finishScenario(t, ld, "10 projector and 10 counter SIGKILLs")
}

// activeFeed returns the bridge whose changefeed runner holds the lease.
func (s *stack) activeFeed(t *testing.T) *proc {
	t.Helper()
	var active *proc
	ok := poll(60*time.Second, 100*time.Millisecond, func() bool {
		for _, p := range s.running("bridge") {
			code, body := p.get("/v1/ops/status")
			if code != 200 {
				continue
			}
			var st struct {
				Components []struct {
					Name   string
					Detail struct{ Role string }
				}
			}
			if json.Unmarshal([]byte(body), &st) != nil {
				continue
			}
			for _, c := range st.Components {
				if c.Name == "changefeed/customers-cdc" && c.Detail.Role == "active" {
					active = p
					return true
				}
			}
		}
		return false
	})
	require.True(t, ok, "one bridge runs the changefeed")
	return active
}

// TestBridgeKillChangefeed: the bridge running the changefeed is SIGKILLed while customers
// change; the standby takes over and every change reaches the topic and the view.
func TestBridgeKillChangefeed(t *testing.T) {
	s, ld := scenario(t, "bkill")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c := s.mongoClient(t).Database(s.db).Collection("customers")
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("live-%d", i)}, {Key: "n", Value: i}})
			if err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		done <- nil
	}()
	ld.waitProgress(0.3, 2*time.Minute)
	victim := s.activeFeed(t)
	victim.Kill()
	t.Logf("SIGKILLed %s, which ran the changefeed", victim.Name)
	next := s.activeFeed(t)
	assert.NotEqual(t, victim.Name, next.Name)
	s.startProc("bridge")
	ld.waitProgress(0.6, 2*time.Minute)
	cancel()
	require.NoError(t, <-done)
	s.finishScenario(t, ld, "bridge with the changefeed SIGKILLed")
}

// TestNATSNodeRestarts: the orders stream's leader node is stopped and restarted while
// publishing, then the meta leader's node.
func TestNATSNodeRestarts(t *testing.T) {
	s, ld := scenario(t, "natsnode")
	for i, at := range []float64{0.25, 0.6} {
		ld.waitProgress(at, 2*time.Minute)
		node := s.nats.StreamLeader("$G", "orders")
		if i == 1 {
			node = s.nats.MetaLeader()
		}
		if node < 0 {
			node = i
		}
		s.nats.Stop(node)
		before := ld.acked()
		require.Eventually(t, func() bool { return ld.acked() >= before+100 }, time.Minute, 20*time.Millisecond,
			"publishing goes on with node %d down", node)
		s.nats.Restart(node)
	}
	s.finishScenario(t, ld, "NATS node restarts (R3)")
}

// TestDLQOutage: the refusals' stream (DLQ_REJECTS) is deleted while refused messages arrive,
// then restored; every refused message ends up in it once.
func TestDLQOutage(t *testing.T) {
	s, ld := scenario(t, "dlqgone")
	nc := s.connect(t, userAdmin) // deletes and restores the DLQ: an operator's doing
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ld.waitProgress(0.3, 2*time.Minute)
	// The client's first refused messages are dead-lettered before the DLQ goes away.
	require.True(t, poll(time.Minute, 100*time.Millisecond, func() bool { return len(s.scanStream(t, dlq.RejectsStreamName)) == ld.ingress.Bad }),
		"the client's first refused messages are in the DLQ")
	str, err := js.Stream(ctx, dlq.RejectsStreamName)
	require.NoError(t, err)
	info, err := str.Info(ctx)
	require.NoError(t, err)
	held := s.scanStream(t, dlq.RejectsStreamName)
	require.NoError(t, js.DeleteStream(ctx, dlq.RejectsStreamName))
	t.Logf("deleted the refusals' stream holding %d dead letters", len(held))
	// Those it held are gone with it: the ledger expects only what is refused from now on.
	ld.l.mu.Lock()
	for _, m := range held {
		delete(ld.l.bad, m.ID)
	}
	ld.l.mu.Unlock()
	for j := range 20 {
		m := nats.NewMsg("in.orders")
		m.Header.Set(jetbus.HeaderMsgID, fmt.Sprintf("dlqgone-late-%d", j))
		m.Data = []byte("{not json")
		require.NoError(t, nc.PublishMsg(m))
		ld.l.add(acked{Bad: m.Header.Get(jetbus.HeaderMsgID)})
	}
	acked := ld.acked()
	require.Eventually(t, func() bool { return ld.acked() >= acked+200 }, time.Minute, 20*time.Millisecond,
		"publishing goes on without the DLQ")
	if _, err := js.Stream(ctx, dlq.RejectsStreamName); err != nil {
		_, err = js.CreateStream(ctx, info.Config)
		require.NoError(t, err, "restore the refusals' stream")
		t.Log("restored the refusals' stream")
	} else {
		t.Log("the refusals' stream was re-created by a process")
	}
	s.finishScenario(t, ld, "DLQ stream deleted for a while")
}

// TestMongoFaults: MongoDB fails writes (failCommand, the next 30 write commands with
// ShutdownInProgress), then is stopped for 10 s and started again on the same port with its
// data.
func TestMongoFaults(t *testing.T) {
	s, ld := scenario(t, "mongo")
	ld.waitProgress(0.25, 2*time.Minute)
	embeddedtest.FailMongoCommands(t, s.mongoClient(t), 30, 91, "update", "delete", "insert")
	t.Log("MongoDB fails the next 30 writes")
	ld.waitProgress(0.5, 2*time.Minute)
	s.stopMongo()
	stoppedAt, before := time.Now(), ld.acked()
	t.Log("MongoDB stopped")
	require.Eventually(t, func() bool { return time.Since(stoppedAt) >= 10*time.Second }, 15*time.Second, 100*time.Millisecond)
	assert.Greater(t, ld.acked(), before, "publishing goes on while MongoDB is down")
	s.startMongo()
	t.Log("MongoDB restarted on the same port with its data")
	s.finishScenario(t, ld, "MongoDB failing writes, then down 10 s")
}

// TestMemberChurn: projector and counter replicas are started and stopped (SIGTERM) every
// few seconds while the load runs.
func TestMemberChurn(t *testing.T) {
	s, ld := scenario(t, "churn")
	for i := range 8 {
		ld.waitProgress(0.1*float64(i+1), 2*time.Minute)
		for _, kind := range []string{"projector", "counter"} {
			s.startProc(kind)
			ps := s.running(kind)
			code, _ := ps[0].Stop(syscall.SIGTERM, 30*time.Second)
			assert.Equal(t, 0, code, "%s exits 0 on SIGTERM", ps[0].Name)
		}
	}
	s.finishScenario(t, ld, "projector and counter churn (8 joins and leaves each)")
}

// TestRestartAll: every process is stopped with SIGTERM mid-load and restarted on the same
// data.
func TestRestartAll(t *testing.T) {
	s, ld := scenario(t, "restart")
	ld.waitProgress(0.4, 2*time.Minute)
	for _, kind := range []string{"bridge", "projector", "counter"} {
		for _, p := range s.running(kind) {
			code, _ := p.Stop(syscall.SIGTERM, 30*time.Second)
			assert.Equal(t, 0, code, "%s exits 0 on SIGTERM", p.Name)
		}
	}
	t.Log("every process stopped")
	s.start()
	s.finishScenario(t, ld, "SIGTERM of everything, restart")
}
