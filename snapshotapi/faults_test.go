package snapshotapi_test

import (
	"context"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// TestMongoFaults: MongoDB failing or slow is a 503 with Retry-After, never a 500, unless
// MongoDB refused a query this API built (a fault of the server, logged).
func TestMongoFaults(t *testing.T) {
	// Under a deadline the driver retries a read until the deadline (client-side operation
	// timeout), selecting a server again after a node said it is stepping down: passing
	// faults are absorbed, lasting ones end in the request timeout.
	cases := []struct {
		name   string
		fault  embeddedtest.MongoFault
		status int
		codes  []string
	}{
		{"shutting down", embeddedtest.MongoFault{Commands: []string{"find"}, Times: 2, Code: 91}, 503, []string{"unavailable", "timeout"}},
		{"not primary", embeddedtest.MongoFault{Commands: []string{"find"}, Times: 2, Code: 10107}, 503, []string{"unavailable", "timeout"}},
		{"connections dropped", embeddedtest.MongoFault{Commands: []string{"find"}, CloseConnection: true}, 503, []string{"unavailable", "timeout"}},
		{"slower than the request timeout", embeddedtest.MongoFault{Commands: []string{"find"}, Times: 1, Block: 2 * time.Second}, 503, []string{"timeout"}},
		{"a query refused", embeddedtest.MongoFault{Commands: []string{"find"}, Times: 1, Code: 2}, 500, []string{"internal"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.RequestTimeout = 300 * time.Millisecond }))
			a.put("orders", doc("k", 1, t0, nil))
			tc.fault.AppName = apiAppName
			embeddedtest.InjectMongoFault(t, a.db.Client(), tc.fault)
			r := a.get("/v1/views/orders/k")
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Contains(t, tc.codes, r.errorCode(t))
			if tc.status == 503 {
				assert.Equal(t, "1", r.Header.Get("Retry-After"))
			}
			assert.NotContains(t, string(r.body), "failCommand", "MongoDB's own error is not passed on")
			for _, leak := range []string{"127.0.0.1", "localhost", "topology", "server selection", "connection"} {
				assert.NotContains(t, strings.ToLower(string(r.body)), leak, "nor the backend's addresses or topology")
			}
			if tc.fault.Times > 0 {
				eventually(t, func() bool { return a.get("/v1/views/orders/k").StatusCode == 200 }, "recovers once MongoDB does")
			}
		})
	}
}

var rsaPublic rsa.PublicKey

// TestNew: New refuses a bad Config or missing Deps; Validate names the field.
func TestNew(t *testing.T) {
	good := func() snapshotapi.Config {
		return snapshotapi.Config{Views: []snapshotapi.View{ordersView("db")}, CursorKey: testKey}
	}
	cases := []struct {
		name   string
		change func(*snapshotapi.Config)
		want   string
	}{
		{"no cursor key", func(c *snapshotapi.Config) { c.CursorKey = nil }, "CursorKey"},
		{"short cursor key", func(c *snapshotapi.Config) { c.CursorKey = []byte("short") }, "CursorKey"},
		{"bad view name", func(c *snapshotapi.Config) { c.Views[0].Name = "Orders!" }, "Views[0]: Name"},
		{"two views of one name", func(c *snapshotapi.Config) { c.Views = append(c.Views, c.Views[0]) }, "Views[1].Name"},
		{"bad topic", func(c *snapshotapi.Config) { c.Views[0].Topic = "in.orders" }, "Views[0]: Topic"},
		{"no collection", func(c *snapshotapi.Config) { c.Views[0].Collection = "" }, "Views[0]: Collection"},
		{"$-prefixed filter", func(c *snapshotapi.Config) {
			c.Views[0].Filters = map[string]snapshotapi.FieldType{"$where": snapshotapi.String}
		}, "Views[0]: Filters"},
		{"filter named like a parameter", func(c *snapshotapi.Config) {
			c.Views[0].Filters = map[string]snapshotapi.FieldType{"limit": snapshotapi.Number}
		}, "reserved"},
		{"unknown filter type", func(c *snapshotapi.Config) { c.Views[0].Filters = map[string]snapshotapi.FieldType{"a": "date"} }, "Filters[a]"},
		{"internal field", func(c *snapshotapi.Config) { c.Views[0].Fields = []string{"_deleted"} }, "Fields"},
		{"max limit", func(c *snapshotapi.Config) { c.Views[0].MaxLimit = 1001 }, "MaxLimit"},
		{"cache control with a newline", func(c *snapshotapi.Config) { c.Views[0].CacheControl = "max-age=1\r\nX: y" }, "CacheControl"},
		{"token for an undeclared view", func(c *snapshotapi.Config) { c.Tokens = []snapshotapi.Token{{Token: "t", Views: []string{"nope"}}} }, "Tokens[0].Views"},
		{"empty token", func(c *snapshotapi.Config) { c.Tokens = []snapshotapi.Token{{Views: []string{"*"}}} }, "Tokens[0].Token"},
		{"two JWT keys", func(c *snapshotapi.Config) {
			c.JWT = snapshotapi.JWT{HS256Secret: []byte("s"), RS256PublicKey: &rsaPublic}
		}, "JWT"},
		{"issuer without a key", func(c *snapshotapi.Config) { c.JWT = snapshotapi.JWT{Issuer: "x"} }, "JWT"},
		{"wait over 10s", func(c *snapshotapi.Config) { c.MaxWait = time.Minute }, "MaxWait"},
		{"default wait over max", func(c *snapshotapi.Config) { c.MaxWait, c.DefaultWait = time.Second, 2*time.Second }, "DefaultWait"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			err := c.Validate()
			require.ErrorIs(t, err, snapshotapi.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			_, err = snapshotapi.New(snapshotapi.Deps{Mongo: embeddedtest.Mongo(t).Client()}, c)
			require.ErrorIs(t, err, snapshotapi.ErrInvalidConfig)
		})
	}
	_, err := snapshotapi.New(snapshotapi.Deps{}, good())
	require.ErrorIs(t, err, snapshotapi.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Deps.Mongo")
	require.NoError(t, good().Validate())
}

// TestLoadCursorKey: replicas starting together share one key, made once and kept.
func TestLoadCursorKey(t *testing.T) {
	ns := embeddedtest.NATS(t)
	ctx := context.Background()
	keys := make(chan []byte, 4)
	for range 4 {
		go func() {
			bus := embeddedtest.Bus(t, ns.ClientURL())
			k, err := snapshotapi.LoadCursorKey(ctx, bus.JetStream(), 1)
			assert.NoError(t, err)
			keys <- k
		}()
	}
	first := <-keys
	require.Len(t, first, snapshotapi.MinCursorKeyBytes)
	for range 3 {
		assert.Equal(t, first, <-keys)
	}
	bus := embeddedtest.Bus(t, ns.ClientURL())
	again, err := snapshotapi.LoadCursorKey(ctx, bus.JetStream(), 1)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.False(t, strings.Contains(string(first), "\x00\x00\x00\x00\x00\x00\x00\x00"), "random")
}
