package ingress

import "github.com/nats-io/nats.go"

// shedRatio: while the subscription's buffer is more than half full, a message larger than
// 1/shedRatio of the room left in it is shed. With the default 64 MiB buffer nothing is shed
// below 32 MiB buffered; at 56 MiB, messages over 256 KiB are; near full, all but the smallest.
const shedRatio = 32

// shed drops m unchecked, and reports so, when the subscription's buffer is filling and m is
// large for the room left: checking a message costs time in proportion to its size, and a
// flood of large messages checked one by one would keep the buffer full, so that NATS would
// drop small messages with them (the buffer admits a message only where it fits). Shedding
// costs a counter per message, so the buffer drains as fast as a flood fills it and the
// messages that fit under the room left are checked and stored. A request among those shed
// is answered unavailable; a fire-and-forget message is counted (ingress_shed_total) as one
// NATS drops would be, not dead-lettered: writing it would cost what shedding saves.
func (g *Ingress) shed(m *nats.Msg) bool {
	sub := g.sub.Load()
	if sub == nil {
		return false
	}
	_, pending, err := sub.Pending()
	if err != nil || pending <= g.cfg.PendingBytes/2 {
		return false
	}
	size := len(m.Data)
	if len(m.Header) > 0 {
		size += headerSize(m.Header)
	}
	room := g.cfg.PendingBytes - pending
	if size <= room/shedRatio {
		return false
	}
	g.stats.shed.Add(1)
	g.m.shed.Inc()
	if logDue(&g.shedLog) {
		g.log.Warn("ingress: its buffer is filling (clients publish faster than it checks): large messages are dropped unchecked (counted in ingress_shed_total); smaller ones are still taken",
			"subject", m.Subject, "size", size, "pending_bytes", pending, "max_pending_bytes", g.cfg.PendingBytes)
	}
	g.noteError(CodeUnavailable)
	if m.Reply != "" && g.replyAllowed(m.Reply) {
		g.send(replyError(m.Reply, refuse(CodeUnavailable, map[string]any{"size": size},
			"ingress is overloaded: a message of %d bytes was dropped unchecked while its buffer was filling; nothing was stored; retry later", size)))
	}
	return true
}
