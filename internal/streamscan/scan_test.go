package streamscan_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/streamscan"
)

// TestScanBoundsFetchesByBytes: a scan reads every message in order with fetches bounded by
// bytes; a message larger than the bound is fetched alone, so large and small messages mix.
func TestScanBoundsFetchesByBytes(t *testing.T) {
	defer streamscan.SetBatchBytes(64 << 10)()
	s := embeddedtest.NATS(t)
	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	const n = 60
	for i := range n {
		size := 100
		if i%3 == 0 {
			size = 100 << 10 // larger than one fetch may hold
		}
		_, err := js.Publish(ctx, "s.x", append([]byte(fmt.Sprintf("%03d", i)), bytes.Repeat([]byte("x"), size)...))
		require.NoError(t, err)
	}
	var got []string
	err = streamscan.Scan(ctx, js, "S", natsjs.OrderedConsumerConfig{}, func(m natsjs.Msg, _ *natsjs.MsgMetadata) bool {
		got = append(got, string(m.Data()[:3]))
		return true
	})
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, g := range got {
		assert.Equal(t, fmt.Sprintf("%03d", i), g)
	}
}

// faultyJS hands out ordered consumers whose fetches take delay more before they reach the
// server (as the ordered consumer's re-creation before each fetch can on a busy cluster),
// and are bounded to maxBytes when it is set (so that no message fits, even alone). The
// consumers and the server are real.
type faultyJS struct {
	natsjs.JetStream
	delay    time.Duration
	maxBytes int
	created  func() // called once a consumer is created
}

func (f faultyJS) OrderedConsumer(ctx context.Context, stream string, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error) {
	c, err := f.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	if f.created != nil {
		f.created()
	}
	return faultyConsumer{Consumer: c, f: f}, nil
}

type faultyConsumer struct {
	natsjs.Consumer
	f faultyJS
}

func (c faultyConsumer) Fetch(n int, opts ...natsjs.FetchOpt) (natsjs.MessageBatch, error) {
	time.Sleep(c.f.delay) // latency injected into the fetch, not a wait for anything
	if c.f.maxBytes > 0 {
		opts = append(opts, natsjs.FetchMaxBytes(c.f.maxBytes))
	}
	return c.Consumer.Fetch(n, opts...)
}

func scanEnv(t *testing.T) (natsjs.JetStream, context.Context) {
	t.Helper()
	s := embeddedtest.NATS(t)
	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	return js, ctx
}

// TestScanFetchesALargeMessageAloneHoweverSlowTheFetch: a message over the fetch budget is
// fetched alone even when the empty fetch before it took more than a second (an ordered
// consumer re-created on a busy cluster): the scan reads every message.
func TestScanFetchesALargeMessageAloneHoweverSlowTheFetch(t *testing.T) {
	defer streamscan.SetBatchBytes(64 << 10)()
	js, ctx := scanEnv(t)
	_, err := js.Publish(ctx, "s.x", append([]byte("000"), bytes.Repeat([]byte("x"), 100<<10)...))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "s.x", []byte("001"))
	require.NoError(t, err)
	var got []string
	err = streamscan.Scan(ctx, faultyJS{JetStream: js, delay: 1100 * time.Millisecond}, "S", natsjs.OrderedConsumerConfig{},
		func(m natsjs.Msg, _ *natsjs.MsgMetadata) bool {
			got = append(got, string(m.Data()[:3]))
			return true
		})
	require.NoError(t, err)
	assert.Equal(t, []string{"000", "001"}, got)
}

// TestScanThatCannotGoOnFails: when the server delivers nothing, not even one message alone,
// while the stream holds messages for the scan, the scan ends with an error, never as if it
// had read the stream to its end.
func TestScanThatCannotGoOnFails(t *testing.T) {
	js, ctx := scanEnv(t)
	for i := range 3 {
		_, err := js.Publish(ctx, "s.x", []byte(fmt.Sprintf("%03d", i)))
		require.NoError(t, err)
	}
	n := 0
	err := streamscan.Scan(ctx, faultyJS{JetStream: js, maxBytes: 1}, "S", natsjs.OrderedConsumerConfig{},
		func(natsjs.Msg, *natsjs.MsgMetadata) bool { n++; return true })
	require.ErrorIs(t, err, streamscan.ErrIncomplete)
	assert.Zero(t, n)
}

// TestScanEndsWhenPendingMessagesAreGone: messages removed ahead of the scan (aged out,
// deleted) after it counted them end it without an error: the server says none are left.
func TestScanEndsWhenPendingMessagesAreGone(t *testing.T) {
	js, ctx := scanEnv(t)
	for i := range 3 {
		_, err := js.Publish(ctx, "s.x", []byte(fmt.Sprintf("%03d", i)))
		require.NoError(t, err)
	}
	purge := func() {
		s, err := js.Stream(ctx, "S")
		require.NoError(t, err)
		require.NoError(t, s.Purge(ctx))
	}
	n := 0
	err := streamscan.Scan(ctx, faultyJS{JetStream: js, created: purge}, "S", natsjs.OrderedConsumerConfig{},
		func(natsjs.Msg, *natsjs.MsgMetadata) bool { n++; return true })
	require.NoError(t, err)
	assert.Zero(t, n)
}
