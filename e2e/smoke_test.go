package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// start runs the processes of a scenario: two bridges, two projectors and two counters (the
// transactional projection of examples/counter).
func (s *stack) start() {
	s.t.Helper()
	s.startProc("bridge")
	s.startProc("bridge")
	s.startProc("projector")
	s.startProc("projector")
	s.startProc("counter")
	s.startProc("counter")
}

// writeCustomers inserts n customers (string IDs with prefix) and updates every other one,
// into the collection the changefeed reads.
func (s *stack) writeCustomers(t *testing.T, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := s.mongoClient(t).Database(s.db).Collection("customers")
	for i := range n {
		_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s-c%d", prefix, i)}, {Key: "name", Value: fmt.Sprintf("customer %d", i)}, {Key: "n", Value: i}})
		require.NoError(t, err)
	}
	for i := 0; i < n; i += 2 {
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s-c%d", prefix, i)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tier", Value: "gold"}}}})
		require.NoError(t, err)
	}
}

// checkETag: a read of a key has a strong ETag, a conditional read of it is a 304, and a
// read-your-writes read of its position answers.
func (s *stack) checkETag(t *testing.T, l *ledger) {
	t.Helper()
	var a acked
	l.mu.Lock()
	for _, a = range l.acked {
		if !a.Deletes {
			break
		}
	}
	l.mu.Unlock()
	p := s.running("projector")[0]
	req, err := http.NewRequest(http.MethodGet, p.url(viewURL("orders", a)), nil)
	require.NoError(t, err)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "read-your-writes read of %s", a.ID)
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.NotContains(t, etag, "W/", "a strong ETag")
	req, err = http.NewRequest(http.MethodGet, p.url("/v1/views/orders/"+url.PathEscape(a.Key)), nil)
	require.NoError(t, err)
	req.Header.Set("If-None-Match", etag)
	resp, err = httpClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotModified, resp.StatusCode, "If-None-Match with the current ETag")
}

// TestSmoke is the short end-to-end run of make test: the six processes on a 3-node cluster
// under load from both clients, one projector and one counter SIGKILLed and replaced, one
// NATS node stopped and restarted while publishing; then every invariant.
func TestSmoke(t *testing.T) {
	s := newStack(t)
	s.start()
	s.writeCustomers(t, "smoke", 20)
	ld := s.startLoad(t, "smoke", envInt("JETBUS_E2E_SMOKE_SECONDS", 12), envInt("JETBUS_E2E_RATE", 50))

	ld.waitProgress(0.25, 60*time.Second)
	for _, kind := range []string{"projector", "counter"} {
		victim := s.running(kind)[0]
		victim.Kill()
		t.Logf("SIGKILLed %s at %d acknowledged", victim.Name, ld.acked())
		s.startProc(kind)
	}

	ld.waitProgress(0.5, 60*time.Second)
	node := s.nats.StreamLeader("$G", "orders")
	if node < 0 {
		node = 0
	}
	s.nats.Stop(node)
	before := ld.acked()
	t.Logf("stopped NATS node %d (the orders stream's leader) at %d acknowledged", node, before)
	require.Eventually(t, func() bool { return ld.acked() >= before+50 }, 60*time.Second, 20*time.Millisecond,
		"publishing goes on with a node down")
	s.nats.Restart(node)
	t.Logf("restarted NATS node %d at %d acknowledged", node, ld.acked())

	fig := ld.finish(2 * time.Minute)
	s.checkAll(t, ld.l)
	s.checkCustomers(t)
	s.checkETag(t, ld.l)
	report(t, "smoke (1 projector and 1 counter SIGKILL, 1 NATS node restart)", fig)
}
