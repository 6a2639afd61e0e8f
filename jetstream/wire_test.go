package jetstream_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
)

// TestPublishRefusesWhatHeadersCannotCarry: reserved headers and control characters are
// refused whether they come from the options or from a publish middleware, and nothing is
// stored.
func TestPublishRefusesWhatHeadersCannotCarry(t *testing.T) {
	s := embeddedtest.NATS(t)
	cases := []struct {
		name string
		edit func(*jetbus.Event)
		want error
	}{
		{"reserved header", func(e *jetbus.Event) { e.SetHeader("x-dlq-replay-group", "g") }, jetbus.ErrReservedHeader},
		{"header value with CRLF", func(e *jetbus.Event) { e.SetHeader("x-note", "a\r\nb") }, jetbus.ErrInvalidHeader},
		{"key with CRLF", func(e *jetbus.Event) { e.Key = "a\r\nb" }, jetbus.ErrInvalidKey},
		{"key too long", func(e *jetbus.Event) { e.Key = string(make([]byte, jetbus.MaxKeyLength+1)) }, jetbus.ErrInvalidKey},
		{"SID with a NUL", func(e *jetbus.Event) { e.SID = "a\x00" }, jetbus.ErrInvalidOption},
		{"ID with LF", func(e *jetbus.Event) { e.ID = "a\nb" }, jetbus.ErrInvalidOption},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mw := func(next jetbus.PublishFunc) jetbus.PublishFunc {
				return func(ctx context.Context, e *jetbus.Event) error { tc.edit(e); return next(ctx, e) }
			}
			b := embeddedtest.Bus(t, s.ClientURL(), jbjs.WithPublishMiddleware(mw))
			ctx := t.Context()
			require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "wire"}))
			_, err := b.Publish(ctx, "wire", map[string]int{"n": 1})
			assert.ErrorIs(t, err, tc.want)
			_, err = b.PublishAsync(ctx, "wire", map[string]int{"n": 1})
			assert.ErrorIs(t, err, tc.want, "async")
			assert.Equal(t, uint64(0), streamMsgs(t, b, "wire"))
		})
	}
}

// TestPublishFutureDuplicate: a second async publish of the same ID is reported as a
// duplicate, with the first one's sequence.
func TestPublishFutureDuplicate(t *testing.T) {
	b := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "dup"}))
	var seqs []uint64
	for i, want := range []bool{false, true} {
		f, err := b.PublishAsync(ctx, "dup", map[string]int{"n": i}, jetbus.WithID("client-retry-1"))
		require.NoError(t, err)
		ev, err := f.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, f.Duplicate(), "publish %d", i)
		seqs = append(seqs, ev.Seq)
	}
	assert.Equal(t, seqs[0], seqs[1])
	assert.Equal(t, uint64(1), streamMsgs(t, b, "dup"))
}
