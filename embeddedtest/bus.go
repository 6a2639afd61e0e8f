package embeddedtest

import (
	"context"
	"testing"
	"time"

	"github.com/jetbus/jetbus/jetstream"
)

// Bus opens a Bus for t on its own connection to url (see Connect), logging to t (Logger),
// with opts after the logger. The Bus is closed when t ends; its connection is bus.Conn(),
// which a test may close to kill the Bus abruptly.
func Bus(t testing.TB, url string, opts ...jetstream.Option) *jetstream.Bus {
	t.Helper()
	nc := Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := jetstream.Open(ctx, nc, append([]jetstream.Option{jetstream.WithLogger(Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("open Bus on %s: %v", url, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
