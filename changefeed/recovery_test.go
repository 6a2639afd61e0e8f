package changefeed

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// TestRecoveryRepairsOrder: after a failed publish, the changes in flight are published
// again one at a time. When a later change of a key was stored while an earlier one was lost
// (as in a leader change), the earlier one is stored now, after it; the recovery sees the
// later one come back as a duplicate and publishes it once more, so the key's last event is
// its latest change.
func TestRecoveryRepairsOrder(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	ctx := t.Context()
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "rec.items", Partitions: 1}))
	snd := &sender{bus: bus, log: slog.New(slog.DiscardHandler)}
	msg := func(id, key, payload string) *message {
		return &message{topic: "rec.items", id: id, key: key, payload: []byte(payload)}
	}
	c1, c2 := msg("c1", "k", `{"v":1}`), msg("c2", "k", `{"v":2}`)
	other := msg("o1", "j", `{"v":1}`)
	// Before the failure, c2 (and the other key's change) landed; c1 was lost.
	for _, m := range []*message{other, c2} {
		_, _, err := snd.sendSync(ctx, m)
		require.NoError(t, err)
	}
	rec := newRecovery(3)
	for _, tc := range []struct {
		m   *message
		dup bool
	}{{c1, false}, {other, true}, {c2, true}} {
		require.True(t, rec.active())
		dup, rejected, err := rec.send(ctx, snd, tc.m)
		require.NoError(t, err)
		assert.False(t, rejected)
		assert.Equal(t, tc.dup, dup, tc.m.id)
	}
	assert.False(t, rec.active(), "only the changes that were in flight")

	st, err := bus.JetStream().Stream(ctx, jetbus.StreamName("rec.items"))
	require.NoError(t, err)
	var ids []string
	for seq := uint64(1); seq <= 4; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		ids = append(ids, m.Header.Get(jetbus.HeaderMsgID))
	}
	assert.Equal(t, []string{"o1", "c2", "c1", "c2~r"}, ids, "the key's last event is its latest change; the other key is untouched")
}
