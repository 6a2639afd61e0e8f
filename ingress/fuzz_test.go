package ingress

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus"
)

// FuzzCheck sends check hostile subjects, reply subjects, headers and bodies. It never
// panics; what it refuses has one of the documented codes; and what it lets through is what
// the Bus accepts (the publish options apply) with a body within the size and depth bounds,
// an ID that is not jetbus's own and a reply subject that is an inbox. make test runs it
// briefly; go test -fuzz FuzzCheck ./ingress/ runs it longer.
func FuzzCheck(f *testing.F) {
	for _, s := range []struct{ subject, reply, headers, body string }{
		{"in.orders", "_INBOX.x", "x-key: k\r\nx-ts: 1700000000000", `{"n":1}`},
		{"in.orders", "orders.p0", "", `{}`},
		{"in.orders", "", "Nats-Msg-Id: replay:ORDERS:1:g", `[]`},
		{"in.Orders", "", "x-dlq-reason: x", `[[[[`},
		{"in.orders.p0", "$KV.x.y", "Nats-Expected-Stream: orders\r\nx-tags: a,,b", `"x"`},
		{"in.orders", "_INBOX.y", "x-key: a\x00b\r\nx-caused-by: ,", strings.Repeat("[", 200)},
		{"in.dlq.orders", "", "X-Key: k\r\nnats-msg-id: a", `{"a":"\u0000"}`},
	} {
		f.Add(s.subject, s.reply, s.headers, []byte(s.body))
	}
	cfg, err := Config{Allow: []string{"orders"}, MaxMessageSize: 4096}.withDefaults()
	if err != nil {
		f.Fatal(err)
	}
	m, _ := newMetrics(nil)
	g := &Ingress{cfg: cfg, topics: map[string]*topicMetrics{"orders": m.topic("orders")}, other: m.topic(otherTopic)}
	f.Fuzz(func(t *testing.T, subject, reply, headers string, body []byte) {
		h := nats.Header{}
		for _, line := range strings.Split(headers, "\r\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				h[k] = append(h[k], v) // as the wire gives them: names as sent
			}
		}
		it := &item{subject: subject, reply: reply, header: h, data: body}
		it.topic = strings.TrimPrefix(subject, SubjectPrefix)
		r := g.check(it)
		if r != nil {
			if !slices.Contains(Codes, r.code) {
				t.Fatalf("undocumented code %q", r.code)
			}
			return
		}
		if _, err := jetbus.ApplyPublishOptions(it.opts...); err != nil {
			t.Fatalf("check let through what the Bus refuses: %v (headers %q)", err, headers)
		}
		if len(body) > cfg.MaxMessageSize {
			t.Fatalf("a body of %d bytes let through", len(body))
		}
		if reply != "" && !g.replyAllowed(reply) {
			t.Fatalf("reply subject %q let through", reply)
		}
		if id := h.Get(jetbus.HeaderMsgID); id != "" {
			if _, reserved := jetbus.ReservedID(id); reserved {
				t.Fatalf("reserved ID %q let through", id)
			}
		}
		if it.topic != "orders" {
			t.Fatalf("topic %q let through", it.topic)
		}
	})
}
