package embeddedtest

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// StreamUpdates watches the stream (and bucket) updates the server at url receives, for tests
// of what a process asks of JetStream. The function it returns lists the streams updated since
// its last call, in the order the server routed the requests ("KV_"-prefixed for a bucket).
//
// The server may answer a request before it has routed it to every other subscriber; it routes
// one connection's messages in order, though. So the function publishes a barrier on conn, the
// connection that sends the updates, and lists what arrived before the barrier did: every
// update conn sent before the call.
func StreamUpdates(t testing.TB, url string, conn *nats.Conn) func() []string {
	t.Helper()
	const prefix = "$JS.API.STREAM.UPDATE."
	barrier := "embeddedtest.barrier." + nats.NewInbox()
	nc := Connect(t, url)
	msgs := make(chan *nats.Msg, 1024)
	for _, subj := range []string{prefix + ">", barrier} {
		if _, err := nc.ChanSubscribe(subj, msgs); err != nil {
			t.Fatalf("embeddedtest: subscribe %s: %v", subj, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("embeddedtest: flush: %v", err)
	}
	return func() []string {
		t.Helper()
		if err := conn.Publish(barrier, nil); err != nil {
			t.Fatalf("embeddedtest: publish the barrier: %v", err)
		}
		var streams []string
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				if m.Subject == barrier {
					return streams
				}
				streams = append(streams, strings.TrimPrefix(m.Subject, prefix))
			case <-timeout:
				t.Fatalf("embeddedtest: the barrier never arrived")
				return nil
			}
		}
	}
}
