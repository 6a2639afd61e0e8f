package snapshotapi_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
	"github.com/jetbus/jetbus/snapshotapi"
)

// TestWatchRefusals: what a watch refuses, before it streams, in the API's error shape.
func TestWatchRefusals(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.Tokens = []snapshotapi.Token{{Name: "app", Token: "orders-token-0123456789", Views: []string{"orders"}},
			{Name: "other", Token: "slim-token-0123456789", Views: []string{"slim"}}}
	}))
	auth := []string{"Authorization", "Bearer orders-token-0123456789"}
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "paid"}})
	s := a.watch("/v1/views/orders?watch=true", auth...)
	first := s.next()
	require.Equal(t, "upsert", first.event)

	cases := []struct {
		name    string
		path    string
		headers []string
		status  int
		code    string
	}{
		{"no token", "/v1/views/orders?watch=true", nil, 401, "unauthorized"},
		{"a token for another view", "/v1/views/orders?watch=true", []string{"Authorization", "Bearer slim-token-0123456789"}, 403, "forbidden"},
		{"an unknown view", "/v1/views/nope?watch=true", auth, 404, "unknown_view"},
		{"a position this API did not issue", "/v1/views/orders?watch=true&since=AAAA", auth, 400, "bad_position"},
		{"a Last-Event-ID this API did not issue", "/v1/views/orders?watch=true", append([]string{"Last-Event-ID", "nope"}, auth...), 400, "bad_position"},
		{"a snapshot's position with other filters", "/v1/views/orders?watch=true&status=eq.paid&since=" + first.id, auth, 400, "bad_position"},
		{"an undeclared filter", "/v1/views/orders?watch=true&colour=eq.red", auth, 400, "bad_query"},
		{"a page's parameter", "/v1/views/orders?watch=true&limit=5", auth, 400, "bad_query"},
		{"watch=maybe", "/v1/views/orders?watch=maybe", auth, 400, "bad_query"},
		{"since without watch", "/v1/views/orders?since=" + first.id, auth, 400, "bad_query"},
		{"JSON only", "/v1/views/orders?watch=true", append([]string{"Accept", "application/json"}, auth...), 406, "not_acceptable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, r := a.openWatch(tc.path, tc.headers...)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.code, r.errorCode(t))
		})
	}
	t.Run("HEAD", func(t *testing.T) {
		r := a.do("HEAD", "/v1/views/orders?watch=true", auth...)
		assert.Equal(t, 400, r.StatusCode)
	})
	t.Run("watch=false is the list", func(t *testing.T) {
		r := a.get("/v1/views/orders?watch=false", auth...)
		require.Equal(t, 200, r.StatusCode)
		assert.Equal(t, []string{"a"}, ids(t, r))
	})
}

// TestWatchSharesOneStream: any number of watches of a collection read one change stream of
// it in the process (a watch catching up from an old position reads its own only until it
// meets it); views over one collection share it too.
func TestWatchSharesOneStream(t *testing.T) {
	a := newAPI(t, false)
	a.set("orders", "a", 1, nil)
	var ss []*stream
	for i := range 6 {
		path := "/v1/views/orders?watch=true"
		if i%2 == 1 {
			path = "/v1/views/slim?watch=true&status=eq.paid"
		}
		s := a.watch(path)
		for e := s.next(); e.event != "synced"; e = s.next() {
		}
		ss = append(ss, s)
	}
	a.set("orders", "a", 2, bson.D{{Key: "status", Value: "paid"}})
	for _, s := range ss {
		e := s.next()
		assert.Equal(t, "upsert", e.event)
		assert.EqualValues(t, 2, e.payload(t).version())
	}
	assert.Equal(t, 1, a.streamsOn("orders"), "one change stream for six watches of two views")
	assert.Equal(t, 1.0, metricSum(t, a, "snapshotapi_watch_streams"))
	assert.Equal(t, 3.0, gaugeOf(t, a, "snapshotapi_watchers", "orders"))
}

// TestWatchMaxWatchers: past Config.MaxWatchers a watch is refused at once with 503 and
// Retry-After; a watch that ended gives its place back.
func TestWatchMaxWatchers(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.MaxWatchers = 1 }))
	s := a.watch("/v1/views/orders?watch=true")
	require.Equal(t, "synced", s.next().event)
	_, r := a.openWatch("/v1/views/orders?watch=true")
	require.Equal(t, 503, r.StatusCode)
	assert.Equal(t, "unavailable", r.errorCode(t))
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	s.close()
	eventually(t, func() bool {
		s, r := a.openWatch("/v1/views/orders?watch=true")
		if s != nil {
			s.close()
		}
		return r.StatusCode == 200
	}, "the place is given back")
}

// TestWatchKeepAlive: an idle watch sends a comment every Config.KeepAlive; when changes
// that did not concern a filtered client went by, the comment carries the id they reached,
// and resuming from it gets only what comes after.
func TestWatchKeepAlive(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.KeepAlive = 50 * time.Millisecond }))
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "open"}})
	s := a.watch("/v1/views/orders?watch=true&status=eq.paid")
	synced := s.next()
	require.Equal(t, "synced", synced.event)
	b := s.block(time.Second)
	assert.Equal(t, []string{"keep-alive"}, b.comments)
	assert.False(t, b.hasID, "nothing went by")

	a.set("orders", "a", 2, bson.D{{Key: "status", Value: "open"}, {Key: "note", Value: "x"}}) // not this client's
	var moved sseEvent
	eventually(t, func() bool {
		moved = s.block(time.Second)
		require.Empty(t, moved.event)
		return moved.hasID
	}, "a keep-alive carries the id reached")
	assert.NotEqual(t, synced.id, moved.id)

	a.set("orders", "b", 1, bson.D{{Key: "status", Value: "paid"}})
	r := a.watch("/v1/views/orders?watch=true&status=eq.paid", "Last-Event-ID", moved.id)
	e := r.next()
	assert.Equal(t, "b", e.payload(t).Key, "only what came after the keep-alive's id")
}

// TestWatchPositionExpired: a position older than the oplog holds, or from before the view
// was rebuilt, is a 410 position_expired telling the client to start again without since.
func TestWatchPositionExpired(t *testing.T) {
	if os.Getenv(embeddedtest.MongoURIEnv) != "" {
		t.Skip("needs the test backend's bounded oplog (Options.OplogSize) to lose history on demand")
	}
	m, err := minimongo.Start(minimongo.Options{OplogSize: 50})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	c, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	db := c.Database("watch410")
	a := newAPIAt(t, m.URI(), db, false)
	a.set("orders", "a", 1, nil)
	r := a.get("/v1/views/orders")
	pos := r.Header.Get("Jetbus-Position")
	require.NotEmpty(t, pos)
	// What the client has is still in the oplog: the watch goes on.
	s := a.watch("/v1/views/orders?watch=true&since=" + pos)
	s.close()

	var noise []any
	for i := range 60 {
		noise = append(noise, bson.D{{Key: "n", Value: i}})
	}
	_, err = db.Collection("noise").InsertMany(context.Background(), noise)
	require.NoError(t, err)
	eventually(t, func() bool { // the hub of the watch above lingers until its stream fails
		_, r := a.openWatch("/v1/views/orders?watch=true&since=" + pos)
		return r.Response != nil && r.StatusCode == 410
	}, "410")
	_, r = a.openWatch("/v1/views/orders?watch=true", "Last-Event-ID", pos)
	require.Equal(t, 410, r.StatusCode)
	assert.Equal(t, "position_expired", r.errorCode(t))
	assert.Contains(t, string(r.body), "without since")

	t.Run("from a generation a rebuild dropped", func(t *testing.T) {
		r := a.get("/v1/views/orders")
		pos := r.Header.Get("Jetbus-Position")
		_, err := db.Collection(snapshotapi.ProjectionsCollection).InsertOne(context.Background(),
			bson.D{{Key: "_id", Value: "orders-view"}, {Key: "generation", Value: 2}, {Key: "collection", Value: "orders-g2"}, {Key: "group", Value: "orders-view-g2"}})
		require.NoError(t, err)
		require.NoError(t, db.Collection("orders").Drop(context.Background())) // the grace period is over
		eventually(t, func() bool {
			_, r := a.openWatch("/v1/views/orders?watch=true&since=" + pos)
			return r.Response != nil && r.StatusCode == 410 && strings.Contains(string(r.body), "rebuilt")
		}, "410 once the rebuild is seen")
	})
}

// metricSum sums a metric's series.
func metricSum(t *testing.T, a *api, name string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// gaugeOf reads a gauge's value with one label value.
func gaugeOf(t *testing.T, a *api, name, label string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}
