package dlq_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/streamscan"
)

// storeLetters stores n dead letters of topic in the DLQ as the middleware writes them (group
// g, keys k0…k<keys-1>, original sequences first+1…), with asynchronous publishes.
func (e *env) storeLetters(topic string, first, n, keys int) {
	t := e.t
	t.Helper()
	js := e.bus.JetStream()
	for i := first; i < first+n; i++ {
		m := nats.NewMsg(dlq.SubjectPrefix + topic)
		seq := strconv.Itoa(i + 1)
		m.Header.Set(jetbus.HeaderMsgID, "dlq:"+jetbus.StreamName(topic)+":"+seq+":g")
		m.Header.Set(dlq.HeaderReason, dlq.ReasonPermanent)
		m.Header.Set(dlq.HeaderGroup, "g")
		m.Header.Set(dlq.HeaderAttempts, "1")
		m.Header.Set(dlq.HeaderOriginalSubject, topic+".p0")
		m.Header.Set(dlq.HeaderOriginalStream, jetbus.StreamName(topic))
		m.Header.Set(dlq.HeaderOriginalSeq, seq)
		m.Header.Set(dlq.HeaderOriginalID, "ev-"+seq)
		m.Header.Set(dlq.HeaderTS, strconv.FormatInt(time.Now().UnixMilli(), 10))
		m.Header.Set(jetbus.HeaderKey, "k"+strconv.Itoa(i%keys))
		m.Data = []byte(`{"n":` + seq + `}`)
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the DLQ did not take the letters")
	}
}

// republished returns, per key, the original sequences of the events replayed to topic, in
// the order the topic stored them.
func (e *env) republished(topic string) map[string][]int {
	out := map[string][]int{}
	err := streamscan.Scan(context.Background(), e.bus.JetStream(), jetbus.StreamName(topic), natsjs.OrderedConsumerConfig{HeadersOnly: true},
		func(m natsjs.Msg, _ *natsjs.MsgMetadata) bool {
			n, err := strconv.Atoi(strings.TrimPrefix(m.Headers().Get(jetbus.HeaderCausedBy), "ev-"))
			require.NoError(e.t, err)
			out[m.Headers().Get(jetbus.HeaderKey)] = append(out[m.Headers().Get(jetbus.HeaderKey)], n)
			return true
		})
	require.NoError(e.t, err)
	return out
}

// cancelAfter is a Publisher that ends a context after n publishes.
type cancelAfter struct {
	dlq.Publisher
	mu     sync.Mutex
	n      int
	cancel func()
}

func (c *cancelAfter) Publish(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error) {
	c.mu.Lock()
	if c.n--; c.n == 0 {
		c.cancel()
	}
	c.mu.Unlock()
	return c.Publisher.Publish(ctx, topic, payload, opts...)
}

// TestInterruptedReplayResumes: a replay whose context ends midway stops with the letters it
// reached replayed and removed; a replay from the position it reports replays the others:
// every letter exactly once, each key's letters in order.
func TestInterruptedReplayResumes(t *testing.T) {
	e := newEnv(t, dlq.Config{})
	e.topic("big", 4)
	const n = 3000
	e.storeLetters("big", 0, n, 50)

	// The context ends in the middle of a chunk, while letters of other keys are being
	// republished.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := &cancelAfter{Publisher: e.bus, n: 1200, cancel: cancel}
	first, err := e.q.Replay(ctx, pub, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "big"}, Progress: func(p dlq.ReplayProgress) {
		assert.Equal(t, n, p.Total, "the estimate is exact without other filters")
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, first)
	t.Logf("first run: %d replayed, last %s, resume at %s", first.Replayed, first.Last, first.Resume)
	assert.GreaterOrEqual(t, first.Replayed, 1200)
	assert.Less(t, first.Replayed, n)
	assert.Zero(t, first.FailedCount)
	require.NotZero(t, first.Resume.Seq)
	left := e.count(dlq.Filter{})
	assert.Equal(t, n-first.Replayed, left, "what was replayed is gone, nothing else")
	oldest, err := e.q.List(context.Background(), dlq.Filter{}, 1)
	require.NoError(t, err)
	assert.Equal(t, oldest[0].Position(), first.Resume, "the resume position is the oldest letter left")
	bare, err := e.q.List(context.Background(), dlq.Filter{From: dlq.Position{Seq: first.Resume.Seq}}, 1)
	require.NoError(t, err)
	assert.Equal(t, oldest[0].Position(), bare[0].Position(), "a sequence without a stream is the DLQ's")

	second, err := e.q.Replay(context.Background(), e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "big", From: first.Resume}})
	require.NoError(t, err)
	assert.Equal(t, n-first.Replayed, second.Replayed)
	assert.Zero(t, second.Resume, "nothing left to resume")
	assert.Zero(t, e.count(dlq.Filter{}))

	got := e.republished("big")
	total := 0
	for k, seqs := range got {
		total += len(seqs)
		assert.IsIncreasing(t, seqs, "key %s in order, each once", k)
	}
	assert.Equal(t, n, total, "every letter replayed exactly once")
}
