package jetstream

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/jetbus/jetbus"
)

// TestRecoveryKeepsTheGapWhileTheApplicationHolds: a pull that ended with deliveries lost in
// flight, while the application held ManualAck deliveries past the ack timeout, cannot be
// recovered (a reset would deliver the held ones again). The recovery then says so and keeps
// the last consumer sequence received, so that the next pull's first delivery shows the gap
// and the recovery is retried: pulling on without that check would hand over later events
// before the lost ones, which the server sends again only after their ack timeout (and a
// transactional projection, having moved its checkpoint past them, would skip them).
func TestRecoveryKeepsTheGapWhileTheApplicationHolds(t *testing.T) {
	b := &Bus{pending: map[pendingKey][]*pendingDelivery{}}
	s := &subscription{bus: b, group: "g", stopCh: make(chan struct{}),
		opts: jetbus.SubscribeOptions{ManualAck: true, AckTimeout: 20 * time.Millisecond}}
	pc := &partConsumer{sub: s, topic: "orders", log: slog.New(slog.DiscardHandler), pinID: "pin", lastDSeq: 41}
	b.addPending(pendingKey{topic: "orders", group: "g", id: "held"}, &pendingDelivery{id: "held", sub: s, pc: pc})

	assert.False(t, pc.recoverDeliveries(), "recovered while the application holds a delivery")
	assert.Equal(t, uint64(41), pc.lastDSeq, "the gap was forgotten: later events would pass the lost ones")
}
