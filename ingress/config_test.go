package ingress_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
)

func TestConfigValidate(t *testing.T) {
	ok := ingress.Config{Allow: []string{"orders"}}
	cases := []struct {
		name  string
		cfg   func(c ingress.Config) ingress.Config
		field string // "" when valid
	}{
		{"defaults", func(c ingress.Config) ingress.Config { return c }, ""},
		{"everything set", func(c ingress.Config) ingress.Config {
			c.MaxMessageSize, c.MaxInFlight, c.PendingMsgs, c.PendingBytes = 10, 10, 10, 10
			c.AckTimeout, c.DrainTimeout, c.ReplyPrefixes = time.Second, time.Second, []string{"_INBOX_app.", "replies."}
			return c
		}, ""},
		{"no topics", func(c ingress.Config) ingress.Config { c.Allow = nil; return c }, "Allow"},
		{"bad topic", func(c ingress.Config) ingress.Config { c.Allow = []string{"orders", "in.orders"}; return c }, "Allow[1]"},
		{"negative size", func(c ingress.Config) ingress.Config { c.MaxMessageSize = -1; return c }, "MaxMessageSize"},
		{"negative in-flight", func(c ingress.Config) ingress.Config { c.MaxInFlight = -1; return c }, "MaxInFlight"},
		{"negative pending", func(c ingress.Config) ingress.Config { c.PendingMsgs = -1; return c }, "PendingMsgs"},
		{"negative pending bytes", func(c ingress.Config) ingress.Config { c.PendingBytes = -1; return c }, "PendingBytes"},
		{"ack timeout too short", func(c ingress.Config) ingress.Config { c.AckTimeout = time.Microsecond; return c }, "AckTimeout"},
		{"negative drain", func(c ingress.Config) ingress.Config { c.DrainTimeout = -time.Second; return c }, "DrainTimeout"},
		{"empty reply prefix", func(c ingress.Config) ingress.Config { c.ReplyPrefixes = []string{""}; return c }, "ReplyPrefixes[0]"},
		{"system reply prefix", func(c ingress.Config) ingress.Config { c.ReplyPrefixes = []string{"$JS."}; return c }, "ReplyPrefixes[0]"},
		{"ingress reply prefix", func(c ingress.Config) ingress.Config { c.ReplyPrefixes = []string{"_INBOX", "in."}; return c }, "ReplyPrefixes[1]"},
		{"wildcard reply prefix", func(c ingress.Config) ingress.Config { c.ReplyPrefixes = []string{"_INBOX.>"}; return c }, "ReplyPrefixes[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg(ok).Validate()
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ingress.ErrInvalidConfig)
			assert.ErrorIs(t, err, jetbus.ErrInvalidConfig)
			assert.ErrorContains(t, err, tc.field)
		})
	}
}

// TestNewRefuses: bad arguments and a shared connection are refused before anything runs.
func TestNewRefuses(t *testing.T) {
	e := newEnv(t)
	shared := embeddedtest.Connect(t, e.url)
	sub, err := shared.SubscribeSync("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	cfg := ingress.Config{Allow: []string{"orders"}}
	_, err = ingress.New(nil, e.bus, e.q, cfg)
	assert.ErrorIs(t, err, jetbus.ErrInvalidOption)
	_, err = ingress.New(embeddedtest.Connect(t, e.url), e.bus, e.q, ingress.Config{})
	assert.ErrorIs(t, err, ingress.ErrInvalidConfig)
	_, err = ingress.New(shared, e.bus, e.q, cfg)
	assert.True(t, errors.Is(err, ingress.ErrSharedConn), "%v", err)
}
