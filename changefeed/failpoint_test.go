package changefeed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

// TestResumeAfterGetMoreFailure: the getMores of a feed's change stream fail after checking
// out their cursor (MongoDB's failGetMoreAfterCursorCheckout, as a network failure or a
// step-down fails them), which destroys the server's cursor. The server labels the errors
// ResumableChangeStreamError; the stream resumes from its last token while writes
// continue, and every change is in the topic exactly once, in order per key.
func TestResumeAfterGetMoreFailure(t *testing.T) {
	cases := []struct {
		name string
		code int
	}{
		{"HostUnreachable", 6},
		{"NetworkTimeout", 89},
		{"NotWritablePrimary", 10107},
		{"InterruptedDueToReplStateChange", 11602},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const app, failures = "getmore-feed", 3
			e := newEnv(t, "gm.items")
			client := mongoClient(t, embeddedtest.MongoURI(t), app)
			f, err := changefeed.New(t.Context(), e.bus, client, changefeed.Config{
				Name: "gm", Database: e.db.Name(), Collection: "items", Topic: "gm.items",
				Format: changefeed.FormatEnvelope, LeaseTTL: time.Second,
			}, changefeed.WithLogger(embeddedtest.Logger(t)), changefeed.WithDeadLetters(e.dlq))
			require.NoError(t, err)
			e.runComponent(f)
			require.True(t, embeddedtest.Poll(30*time.Second, 10*time.Millisecond, func() bool {
				return savedPosition(t, e.bus.JetStream(), "gm") != nil
			}), "first position saved")

			w := startWriter(t, e.db.Collection("items"), 10, 2*time.Millisecond)
			require.True(t, embeddedtest.Poll(60*time.Second, 5*time.Millisecond, func() bool { return e.countNow("gm.items") >= 50 }), "the feed publishes")
			before := embeddedtest.MongoFailPointActivations(t, e.db.Client(), embeddedtest.FailGetMoreAfterCursorCheckout)
			embeddedtest.FailMongoGetMores(t, e.db.Client(), failures, tc.code, app)
			n := e.count("gm.items")
			require.True(t, embeddedtest.Poll(60*time.Second, 5*time.Millisecond, func() bool { return e.countNow("gm.items") >= n+200 }),
				"the feed publishes on after the failures")
			checkExactlyOnce(t, e, "gm.items", w)
			assert.Equal(t, before+failures, embeddedtest.MongoFailPointActivations(t, e.db.Client(), embeddedtest.FailGetMoreAfterCursorCheckout),
				"every injected getMore failure happened")
			st, err := f.Status(t.Context())
			require.NoError(t, err)
			assert.Equal(t, changefeed.RoleActive, st.(changefeed.Status).Role)
			ls, err := e.dlq.List(t.Context(), dlq.Filter{Topic: "gm.items"}, 0)
			require.NoError(t, err)
			assert.Empty(t, ls, "nothing dead-lettered")
		})
	}
}
