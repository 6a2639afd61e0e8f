package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/jetstream"
)

// acked is one event a client published and got acknowledged.
type acked struct {
	ID        string  `json:"id"`
	I         int     `json:"i"`
	Key       string  `json:"key"`
	Sent      float64 `json:"sent"`  // Unix ms, when first sent
	Acked     float64 `json:"acked"` // Unix ms
	Partition int     `json:"partition"`
	Seq       uint64  `json:"seq"`
	Duplicate bool    `json:"duplicate"`
	Attempts  int     `json:"attempts"`
	Error     string  `json:"error"`
	Bad       string  `json:"bad"`
	Done      bool    `json:"done"`
	// TraceParent is the traceparent the client sent (publishPlan.Trace).
	TraceParent string `json:"traceparent"`
	// Deletes says the key's last event is a tombstone: once applied, the key reads 404.
	Deletes bool `json:"-"`
}

// ledger is what the clients were told: the acknowledged events (which must all be in their
// topic exactly once), the ones given up (which may or may not be), and the ones made to fail.
type ledger struct {
	mu      sync.Mutex
	acked   map[string]acked // by event ID
	failed  map[string]string
	bad     map[string]bool // refused by design: each must be in the DLQ
	visible chan acked      // acknowledged events, for the latency readers (never blocks the client)
	reading atomic.Int64    // events queued in visible or being read
}

func newLedger() *ledger {
	return &ledger{acked: map[string]acked{}, failed: map[string]string{}, bad: map[string]bool{}, visible: make(chan acked, 1<<16)}
}

func (l *ledger) add(a acked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case a.Bad != "":
		l.bad[a.Bad] = true
	case a.Error != "":
		l.failed[a.ID] = a.Error
	case a.ID != "":
		l.acked[a.ID] = a
		l.reading.Add(1)
		select {
		case l.visible <- a:
		default:
			l.reading.Add(-1)
		}
	}
}

func (l *ledger) counts() (acks, fails, bad int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.failed), len(l.bad)
}

// publishPlan is what a client publishes: count events over keys, at rate per second
// (0: as fast as acknowledgements come), and bad refused fire-and-forget messages. With Trace
// each event carries a traceparent of a trace of its own (sampled), which the client reports.
type publishPlan struct {
	Prefix string
	Count  int
	Keys   int
	Rate   int
	Bad    int
	Trace  bool
}

// nodeClientDir is the Node client; installed by make e2e-node.
const nodeClientDir = "nodeclient"

func nodeInstalled() bool {
	_, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "nats", "package.json"))
	return err == nil
}

// publishNode runs the Node client for plan through ingress and records what it was told.
// It returns when the client has finished.
func (s *stack) publishNode(ctx context.Context, l *ledger, plan publishPlan) error {
	cmd := exec.CommandContext(ctx, "node", "publish.mjs",
		"--servers="+s.nats.URLs(), "--user="+userClient, "--pass="+s.passwords[userClient], "--topic=orders", fmt.Sprintf("--count=%d", plan.Count),
		fmt.Sprintf("--keys=%d", plan.Keys), fmt.Sprintf("--rate=%d", plan.Rate),
		"--prefix="+plan.Prefix, fmt.Sprintf("--bad=%d", plan.Bad), fmt.Sprintf("--trace=%t", plan.Trace))
	cmd.Dir = nodeClientDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var a acked
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			_, _ = io.Copy(io.Discard, out)
			_ = cmd.Wait()
			return fmt.Errorf("node client wrote %q: %w", sc.Text(), err)
		}
		done = done || a.Done
		l.add(a)
	}
	if err := cmd.Wait(); err != nil || !done {
		return fmt.Errorf("node client: %v (finished: %t): %s", err, done, stderr.String())
	}
	return nil
}

// publishIngressGo speaks the ingress protocol with nats.go exactly as the Node client does
// (same IDs, keys, payloads, retries): the smoke's stand-in when Node's client is not
// installed. It logs in as the client user, as the Node client does.
func (s *stack) publishIngressGo(ctx context.Context, t *testing.T, l *ledger, plan publishPlan) error {
	nc := s.connect(t, userClient)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range min(plan.Keys, plan.Count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < plan.Count; i += plan.Keys {
				if plan.Rate > 0 {
					due := start.Add(time.Duration(i) * time.Second / time.Duration(plan.Rate))
					if d := time.Until(due); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
				}
				l.add(requestOne(ctx, nc, plan, i))
			}
		}()
	}
	for j := range plan.Bad {
		m := nats.NewMsg("in.orders")
		m.Header.Set(jetbus.HeaderMsgID, fmt.Sprintf("%s-bad-%d", plan.Prefix, j))
		m.Data = fmt.Appendf(nil, "not json %d", j)
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
		l.add(acked{Bad: m.Header.Get(jetbus.HeaderMsgID)})
	}
	wg.Wait()
	return nc.Flush()
}

func unixMS(t time.Time) float64 { return float64(t.UnixNano()) / 1e6 }

func payload(plan publishPlan, i int) (key string, body []byte) {
	key = fmt.Sprintf("%s-k%d", plan.Prefix, i%plan.Keys)
	status := "open"
	if i%3 == 0 {
		status = "paid"
	}
	body, _ = json.Marshal(map[string]any{"key": key, "n": i, "status": status, "total": i})
	return key, body
}

func requestOne(ctx context.Context, nc *nats.Conn, plan publishPlan, i int) acked {
	key, body := payload(plan, i)
	id := fmt.Sprintf("%s-%d", plan.Prefix, i)
	m := nats.NewMsg("in.orders")
	m.Header.Set(jetbus.HeaderMsgID, id)
	m.Header.Set(jetbus.HeaderKey, key)
	tp := ""
	if plan.Trace {
		tp = newTraceParent()
		m.Header.Set(jetbus.HeaderTraceParent, tp)
	}
	m.Data = body
	sent := time.Now()
	last := ""
	backoff := 50 * time.Millisecond
	for attempt := 1; time.Since(sent) < 2*time.Minute && ctx.Err() == nil; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := nc.RequestMsgWithContext(rctx, m)
		cancel()
		if err == nil {
			var r struct {
				acked
				Error *struct{ Code, Message string } `json:"error"`
			}
			if err = json.Unmarshal(resp.Data, &r); err == nil && r.Error == nil {
				r.acked.Key, r.acked.I, r.acked.Sent, r.acked.Acked, r.acked.Attempts = key, i, unixMS(sent), unixMS(time.Now()), attempt
				r.acked.TraceParent = tp
				return r.acked
			}
			if err == nil {
				last = r.Error.Code + ": " + r.Error.Message
				if r.Error.Code != "unavailable" {
					break
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, time.Second)
	}
	return acked{ID: id, I: i, Key: key, Error: last, TraceParent: tp}
}

// newTraceParent is the traceparent of a span of a new trace, sampled, as a client's tracer
// would send it.
func newTraceParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// publishIngress publishes plan through ingress with the Node client when installed, else
// with the nats.go stand-in.
func (s *stack) publishIngress(ctx context.Context, t *testing.T, l *ledger, plan publishPlan) error {
	if nodeInstalled() {
		return s.publishNode(ctx, l, plan)
	}
	t.Log("the Node client is not installed (make e2e-node): publishing through ingress with nats.go instead")
	return s.publishIngressGo(ctx, t, l, plan)
}

// publishBus publishes plan directly with the Bus (the Go client), each event with its own ID,
// retried with that ID until acknowledged; the last event of every third key is a tombstone.
// A Bus publishing straight to JetStream is a trusted producer: it logs in as the producer
// user, not as a client.
func (s *stack) publishBus(ctx context.Context, t *testing.T, l *ledger, plan publishPlan) {
	bus := s.bus(t, userProducer)
	var wg sync.WaitGroup
	for w := range min(plan.Keys, plan.Count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < plan.Count; i += plan.Keys {
				key, body := payload(plan, i)
				if i >= plan.Count-plan.Keys && w%3 == 0 {
					body = []byte("null") // the last event of every third key deletes it
				}
				id := fmt.Sprintf("%s-%d", plan.Prefix, i)
				sent := time.Now()
				a := acked{ID: id, I: i, Key: key, Sent: unixMS(sent), Deletes: w%3 == 0}
				for a.Attempts = 1; ; a.Attempts++ {
					pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					ev, err := bus.Publish(pctx, "orders", json.RawMessage(body), jetbus.WithID(id), jetbus.WithKey(key))
					cancel()
					if err == nil {
						a.Acked, a.Partition, a.Seq = unixMS(time.Now()), ev.Partition, ev.Seq
						break
					}
					if ctx.Err() != nil || time.Since(sent) > 2*time.Minute || !retryable(err) {
						a.Error = err.Error()
						break
					}
					select {
					case <-time.After(100 * time.Millisecond):
					case <-ctx.Done():
					}
				}
				l.add(a)
			}
		}()
	}
	wg.Wait()
}

func retryable(err error) bool {
	return !errors.Is(err, jetbus.ErrInvalidOption) && !errors.Is(err, jetbus.ErrInvalidKey)
}

var _ = jetstream.Open // the Go client is the Bus of package jetstream

// viewURL is the read-your-writes read of a's key in view.
func viewURL(view string, a acked) string {
	return fmt.Sprintf("/v1/views/%s/%s?after=%d:%d&wait=2s", view, url.PathEscape(a.Key), a.Partition, a.Seq)
}

// latencies reads each acknowledged event back over HTTP (read-your-writes, from any running
// projector) until it is visible, and records publish-to-visible times; it stops when ctx
// ends and returns the times of the events it saw.
func (s *stack) latencies(ctx context.Context, l *ledger, readers int) func() []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case a := <-l.visible:
					ok := s.waitVisible(ctx, a)
					l.reading.Add(-1)
					if ok {
						d := time.Duration((unixMS(time.Now()) - a.Sent) * float64(time.Millisecond))
						mu.Lock()
						out = append(out, d)
						mu.Unlock()
					}
				}
			}
		}()
	}
	return func() []time.Duration { wg.Wait(); mu.Lock(); defer mu.Unlock(); return out }
}

// waitVisible polls until a's position is applied in the orders view and its key is there.
func (s *stack) waitVisible(ctx context.Context, a acked) bool {
	for ctx.Err() == nil {
		ps := s.running("projector")
		if len(ps) == 0 {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ctx.Done():
				return false
			}
		}
		// 503: not applied yet; 404 once applied: a tombstone deleted the key.
		code, _ := ps[a.I%len(ps)].get(viewURL("orders", a))
		if code == 200 || (code == 404 && a.Deletes) {
			return true
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return false
}

// waitAcked waits until the ledger holds n outcomes (acknowledged or given up).
func waitAcked(t *testing.T, l *ledger, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { a, f, _ := l.counts(); return a+f >= n }, within, 50*time.Millisecond)
}
