package ingress_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestFireAndForgetGarbage: a client that publishes without a reply subject and sends garbage
// between valid messages: every valid message is stored, in order, and every refused one is
// a dead letter with reason ingress, its code first in the error, its subject, headers and
// body. Refusing the same message again (same Nats-Msg-Id) keeps one dead letter.
func TestFireAndForgetGarbage(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders", Partitions: 3}, jbjs.TopicConfig{Name: "refunds"})
	_, err := e.reg.Register(context.Background(), "orders", []byte(`{"type":"object","required":["n"]}`))
	require.NoError(t, err)
	g := e.run(ingress.Config{Allow: []string{"orders"}, MaxMessageSize: 2048})
	nc := client(t, e.url)

	garbage := []struct {
		name    string
		subject string
		body    string
		header  nats.Header
		reply   string
		code    string
		dlqSubj string
	}{
		{"not JSON", "in.orders", `{"n":`, nil, "", "not_json", "dlq_rejects.orders"},
		{"schema-invalid", "in.orders", `{"m":1}`, nil, "", "schema", "dlq_rejects.orders"},
		{"bad topic", "in.Orders.X", `{"n":1}`, nil, "", "bad_topic", dlq.RejectsUnroutedSubject},
		{"not allowed", "in.refunds", `{"n":1}`, nil, "", "not_allowed", dlq.RejectsOtherSubject},
		{"oversize", "in.orders", `{"n":1,"pad":"` + strings.Repeat("x", 3000) + `"}`, nil, "", "too_large", "dlq_rejects.orders"},
		{"reserved header", "in.orders", `{"n":1}`, nats.Header{"x-dlq-reason": {"x"}, jetbus.HeaderMsgID: {"g-1"}}, "", "reserved_header", "dlq_rejects.orders"},
		{"reply not an inbox", "in.orders", `{"n":2}`, nats.Header{jetbus.HeaderMsgID: {"g-2"}}, "orders.p0", "not_allowed", "dlq_rejects.orders"},
	}
	const valid = 60
	n := 0
	for i := range valid {
		m := nats.NewMsg("in.orders")
		m.Data = fmt.Appendf(nil, `{"n":%d}`, i)
		m.Header.Set("x-key", "same") // one partition, so the order is visible
		require.NoError(t, nc.PublishMsg(m))
		if i%(valid/len(garbage)) == 0 && n < len(garbage) {
			gb := garbage[n]
			n++
			m := &nats.Msg{Subject: gb.subject, Reply: gb.reply, Data: []byte(gb.body), Header: gb.header}
			require.NoError(t, nc.PublishMsg(m))
		}
	}
	require.Equal(t, len(garbage), n)
	// The same refused message again: one dead letter.
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "in.orders", Data: []byte(`{"n":1}`), Header: nats.Header{"x-dlq-reason": {"x"}, jetbus.HeaderMsgID: {"g-1"}}}))
	require.NoError(t, nc.Flush())

	require.Eventually(t, func() bool { return e.count("orders") == valid }, wait, 10*time.Millisecond, "every valid message lands")
	require.Eventually(t, func() bool { return e.dlqCount() == uint64(len(garbage)) }, wait, 10*time.Millisecond, "every refused one is a dead letter")
	for i, m := range e.stored("orders") {
		var v struct{ N int }
		require.NoError(t, json.Unmarshal(m.Data, &v))
		assert.Equal(t, i, v.N, "stored in the order published")
	}
	letters := map[string]*dlq.Letter{}
	for _, l := range e.letters(dlq.Filter{}) {
		letters[strings.SplitN(l.Error, ":", 2)[0]+" "+l.OriginalSubject+" "+string(l.Body)] = l
	}
	for _, gb := range garbage {
		t.Run(gb.name, func(t *testing.T) {
			l := letters[gb.code+" "+gb.subject+" "+gb.body]
			require.NotNil(t, l, "a dead letter with the code first and the body kept: %v", keys(letters))
			assert.False(t, strings.HasPrefix(l.Error, gb.code+": "+gb.code+": "), "the code once: %q", l.Error)
			assert.Equal(t, dlq.ReasonIngress, l.Reason)
			assert.Equal(t, "ingress", l.Group)
			assert.True(t, l.Rejected())
			assert.Equal(t, gb.subject, l.OriginalSubject)
			assert.Equal(t, gb.dlqSubj, dlqSubject(t, e, l))
			if gb.code != "bad_topic" {
				assert.Equal(t, strings.TrimPrefix(gb.subject, "in."), l.Topic, "the letter keeps its topic")
			}
			for k := range gb.header {
				if k != jetbus.HeaderMsgID && !strings.HasPrefix(k, "x-dlq-") {
					assert.Equal(t, gb.header.Get(k), l.Header.Get(k), "header %s kept", k)
				}
			}
			if id := gb.header.Get(jetbus.HeaderMsgID); id != "" {
				assert.Equal(t, id, l.OriginalID, "the client's ID")
			}
		})
	}
	st := g.Stats()
	assert.Equal(t, uint64(valid), st.Accepted)
	assert.Equal(t, uint64(2), st.Rejected[ingress.CodeNotAllowed])
	assert.Equal(t, uint64(2), st.Rejected[ingress.CodeReservedHeader], "the repeat is refused again")
	assert.Zero(t, st.InFlight)
}

// TestDeadLetterTooLargeForTheDLQ: a body near the server's max payload is refused
// (too_large) and still dead-lettered: the DLQ's own headers would not fit, so the letter
// keeps the first bytes and says so, marked truncated (the whole body's size and SHA-256)
// though dlq.rejects.max_body is 0: it cannot be replayed.
func TestDeadLetterTooLargeForTheDLQ(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	e.run(ingress.Config{Allow: []string{"orders"}, MaxMessageSize: 1024})
	nc := client(t, e.url)
	body := []byte(`"` + strings.Repeat("y", int(nc.MaxPayload())-200) + `"`)
	require.NoError(t, nc.Publish("in.orders", body))
	require.Eventually(t, func() bool { return e.dlqCount() == 1 }, wait, 10*time.Millisecond)
	l := e.letters(dlq.Filter{})[0]
	assert.True(t, strings.HasPrefix(l.Error, "too_large: "), l.Error)
	assert.Contains(t, l.Error, fmt.Sprintf("of %d bytes", len(body)))
	assert.Less(t, len(l.Body), len(body))
	assert.Equal(t, body[:len(l.Body)], []byte(l.Body))
	sum := sha256.Sum256(body)
	assert.True(t, l.Truncated(), "a cut body is marked so")
	assert.Equal(t, len(body), l.BodySize)
	assert.Equal(t, hex.EncodeToString(sum[:]), l.BodySHA256)
	rep, err := e.q.Replay(context.Background(), e.bus, dlq.ReplayOptions{Force: true})
	require.NoError(t, err)
	assert.Zero(t, rep.Replayed)
	assert.ErrorIs(t, rep.Failed[l.Position()], dlq.ErrNotReplayable, "a cut body is never replayed")

	// Headers JetStream would not store are dropped from the letter; the body stays.
	m := nats.NewMsg("in.orders")
	m.Data = []byte(`{"n":1}`)
	m.Header.Set("x-note", strings.Repeat("h", 70_000))
	m.Header.Set("x-dlq-reason", "forged")
	require.NoError(t, nc.PublishMsg(m))
	require.Eventually(t, func() bool { return e.dlqCount() == 2 }, wait, 10*time.Millisecond)
	var hl *dlq.Letter
	for _, l := range e.letters(dlq.Filter{}) {
		if !strings.HasPrefix(l.Error, "too_large: payload") {
			hl = l
		}
	}
	require.NotNil(t, hl)
	assert.Contains(t, hl.Error, "the client's headers are dropped")
	assert.Empty(t, hl.Header.Get("x-note"))
	assert.Equal(t, dlq.ReasonIngress, hl.Reason, "x-dlq-reason is the DLQ's, never the client's")
	assert.Equal(t, `{"n":1}`, string(hl.Body))
}

func keys(m map[string]*dlq.Letter) []string {
	var out []string
	for k := range m {
		if len(k) > 60 {
			k = k[:60]
		}
		out = append(out, k)
	}
	return out
}

// dlqSubject returns the subject the letter's stream holds it on.
func dlqSubject(t *testing.T, e *env, l *dlq.Letter) string {
	t.Helper()
	s, err := e.js.Stream(context.Background(), l.Stream)
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), l.Seq)
	require.NoError(t, err)
	return m.Subject
}

// TestLargeRefusalKeptTruncated: a raw client's 512 KiB message that ingress refuses is kept
// with the first dlq.rejects.max_body bytes of its body, the whole body's size and SHA-256,
// the reason and the client's headers; it cannot be replayed, even forced. A client's own
// x-dlq-body-* headers say nothing.
func TestLargeRefusalKeptTruncated(t *testing.T) {
	e := newEnv(t, jbjs.TopicConfig{Name: "orders"})
	const maxBody = 64 << 10
	q, err := dlq.Open(context.Background(), e.js, dlq.Config{Rejects: dlq.RejectsConfig{MaxBody: maxBody}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	e.q = q
	e.run(ingress.Config{Allow: []string{"orders"}})
	nc := client(t, e.url)
	body := append([]byte(`{"n":`), bytes.Repeat([]byte("7"), 512<<10-5)...) // not JSON: never closed
	m := nats.NewMsg("in.orders")
	m.Data = body
	m.Header.Set(jetbus.HeaderMsgID, "big-1")
	m.Header.Set("x-note", "kept")
	require.NoError(t, nc.PublishMsg(m))
	small := nats.NewMsg("in.orders")
	small.Data = []byte(`{"n":`)
	small.Header.Set(jetbus.HeaderMsgID, "small-1")
	small.Header.Set(dlq.HeaderBodySHA256, "forged")
	small.Header.Set(dlq.HeaderBodySize, "1")
	require.NoError(t, nc.PublishMsg(small))
	require.Eventually(t, func() bool { return e.dlqCount() == 2 }, wait, 10*time.Millisecond)

	byID := map[string]*dlq.Letter{}
	for _, l := range e.letters(dlq.Filter{}) {
		byID[l.OriginalID] = l
	}
	l := byID["big-1"]
	require.NotNil(t, l)
	sum := sha256.Sum256(body)
	assert.True(t, l.Truncated())
	assert.Equal(t, dlq.RejectsStreamName, l.Stream)
	assert.Equal(t, body[:maxBody], []byte(l.Body), "the first max_body bytes")
	assert.Equal(t, len(body), l.BodySize)
	assert.Equal(t, hex.EncodeToString(sum[:]), l.BodySHA256)
	assert.Equal(t, strconv.Itoa(len(body)), l.Header.Get(dlq.HeaderBodySize), "on the wire")
	assert.Equal(t, hex.EncodeToString(sum[:]), l.Header.Get(dlq.HeaderBodySHA256))
	assert.True(t, strings.HasPrefix(l.Error, "not_json: "), l.Error)
	assert.Equal(t, "kept", l.Header.Get("x-note"))
	assert.False(t, byID["small-1"].Truncated(), "a client's x-dlq-body-* headers are not the DLQ's")
	assert.Empty(t, byID["small-1"].Header.Get(dlq.HeaderBodySHA256))

	rep, err := e.q.Replay(context.Background(), e.bus, dlq.ReplayOptions{Filter: dlq.Filter{Topic: "orders"}, Force: true,
		Transform: func(*dlq.Letter) (json.RawMessage, error) { return json.RawMessage(`{"n":1}`), nil }})
	require.NoError(t, err)
	require.Contains(t, rep.Failed, l.Position())
	assert.ErrorIs(t, rep.Failed[l.Position()], dlq.ErrNotReplayable)
	assert.ErrorContains(t, rep.Failed[l.Position()], "only the first 65536 of its 524288 bytes were kept")
	assert.Equal(t, 1, rep.Replayed, "the small one, forced and fixed, is replayed")
	assert.Equal(t, uint64(1), e.dlqCount(), "the truncated one stays")
}
