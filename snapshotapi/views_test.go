package snapshotapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/snapshotapi"
)

// TestListFilters: each operator on each field type, as a client writes them.
func TestListFilters(t *testing.T) {
	a := newAPI(t, false)
	at := func(s string) bson.DateTime {
		return bson.NewDateTimeFromTime(t0.Add(time.Duration(len(s)) * time.Hour))
	}
	a.put("orders",
		doc("a", 1, t0, bson.D{{Key: "status", Value: "open"}, {Key: "total", Value: int64(5)}, {Key: "paid", Value: false}, {Key: "created", Value: at("a")}, {Key: "customer", Value: bson.D{{Key: "id", Value: "c1"}}}}),
		doc("bb", 1, t0, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: 10.5}, {Key: "paid", Value: true}, {Key: "created", Value: at("bb")}, {Key: "customer", Value: bson.D{{Key: "id", Value: "c2"}}}}),
		doc("ccc", 1, t0, bson.D{{Key: "status", Value: "paid,late"}, {Key: "total", Value: int32(20)}, {Key: "paid", Value: true}, {Key: "created", Value: "2026-03-01T13:00:00.250Z"}}),
		doc("dddd", 1, t0, bson.D{{Key: "status", Value: "shipped"}, {Key: "_deleted", Value: true}}), // a kept tombstone
	)
	cases := []struct{ query, want string }{
		{"", "a bb ccc"},
		{"status=eq.paid", "bb"},
		{"status=ne.paid", "a ccc"},
		{"status=in.(open,%22paid,late%22)", "a ccc"},
		{"status=prefix.pa", "bb ccc"},
		{"status=gte.paid", "bb ccc"},
		{"total=gt.5", "bb ccc"},
		{"total=gte.5&total=lt.20", "a bb"},
		{"total=eq.20", "ccc"},
		{"total=in.(5,20.0)", "a ccc"},
		{"paid=eq.true", "bb ccc"},
		{"paid=ne.true", "a"},
		{"customer.id=eq.c2", "bb"},
		{"created=gt." + t0.Add(90*time.Minute).Format(time.RFC3339), "bb ccc"}, // a date by its instant, a string as written
		{"created=lte.2026-03-01T13:00:00.250Z", "a bb ccc"},
		{"created=eq.1772370000250", "ccc"}, // Unix ms: a date, or a string in JavaScript's form
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			r := a.get("/v1/views/orders?" + tc.query)
			require.Equal(t, 200, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.want, strings.Join(ids(t, r), " "))
		})
	}
	t.Run("a kept tombstone is a 404", func(t *testing.T) {
		r := a.get("/v1/views/orders/dddd")
		require.Equal(t, 404, r.StatusCode)
		assert.Equal(t, "not_found", r.errorCode(t))
	})
	t.Run("order by rank with meta", func(t *testing.T) {
		r := a.get("/v1/views/orders?order=created.desc&meta=1&limit=2")
		require.Equal(t, 200, r.StatusCode)
		items := r.json(t)["items"].([]any)
		require.Len(t, items, 2)
		assert.Contains(t, items[0], "_v")
		assert.NotEmpty(t, r.json(t)["next"])
		assert.Contains(t, r.Header.Get("Link"), "meta=1")
	})
}

// TestListETag: an unchanged page answers 304; a change of a version on it, or of what
// comes after it, does not.
func TestListETag(t *testing.T) {
	a := newAPI(t, false)
	a.put("orders", doc("a", 1, t0, nil), doc("b", 1, t0, nil))
	r := a.get("/v1/views/orders?limit=2")
	require.Equal(t, 200, r.StatusCode)
	etag := r.Header.Get("ETag")
	require.Regexp(t, `^"l-[A-Za-z0-9_-]{22}"$`, etag)
	assert.Empty(t, r.Header.Get("Link"), "the last page")
	assert.Equal(t, 304, a.get("/v1/views/orders?limit=2", "If-None-Match", etag).StatusCode)
	gz := a.get("/v1/views/orders?limit=2", "Accept-Encoding", "gzip")
	assert.Equal(t, "gzip", gz.Header.Get("Content-Encoding"))
	assert.Equal(t, strings.TrimSuffix(etag, `"`)+`-gz"`, gz.Header.Get("ETag"))
	assert.Equal(t, r.body, gz.body)

	a.put("orders", doc("c", 1, t0, nil)) // after the page: now there is a next page
	r2 := a.get("/v1/views/orders?limit=2", "If-None-Match", etag)
	require.Equal(t, 200, r2.StatusCode)
	assert.NotEmpty(t, r2.Header.Get("Link"))
	etag = r2.Header.Get("ETag")
	a.put("orders", doc("b", 2, t0, nil)) // a new version on the page
	assert.Equal(t, 200, a.get("/v1/views/orders?limit=2", "If-None-Match", etag).StatusCode)
}

// TestRebuildSwitch: after a rebuild switches the projection's live collection in
// jetbus_projections, readers follow within a second, cache included.
func TestRebuildSwitch(t *testing.T) {
	ctx := context.Background()
	a := newAPI(t, true)
	a.put("orders", doc("k", 5, t0, bson.D{{Key: "status", Value: "old"}}))
	a.put("orders-g2", doc("k", 5, t0, bson.D{{Key: "status", Value: "rebuilt"}}))
	old := a.get("/v1/views/orders/k")
	require.Equal(t, "old", old.json(t)["status"])
	oldList := a.get("/v1/views/orders")
	_, err := a.db.Collection(snapshotapi.ProjectionsCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "orders-view"},
		{Key: "generation", Value: 2}, {Key: "collection", Value: "orders-g2"}, {Key: "group", Value: "orders-view-g2"}, {Key: "switched", Value: time.Now()}})
	require.NoError(t, err)
	switched := time.Now()
	eventually(t, func() bool { return a.get("/v1/views/orders/k").json(t)["status"] == "rebuilt" }, "the live collection switches")
	assert.Less(t, time.Since(switched), 1500*time.Millisecond, "within the second docs/views.md allows")
	assert.Equal(t, []string{"k"}, ids(t, a.get("/v1/views/orders")))
	// The same version in the new generation is another representation: the old entity tags
	// no longer match, so a client holding one gets the rebuilt body, not a 304.
	r := a.get("/v1/views/orders/k", "If-None-Match", old.Header.Get("ETag"))
	assert.Equal(t, 200, r.StatusCode, "a key's tag covers the generation")
	assert.NotEqual(t, old.Header.Get("ETag"), r.Header.Get("ETag"))
	assert.Equal(t, "rebuilt", r.json(t)["status"])
	assert.Equal(t, 200, a.get("/v1/views/orders", "If-None-Match", oldList.Header.Get("ETag")).StatusCode, "a list's tag covers the generation")
	assert.Equal(t, 304, a.get("/v1/views/orders/k", "If-None-Match", r.Header.Get("ETag")).StatusCode, "the new tag is stable")
	// Read-your-writes follows the new group's checkpoints.
	_, err = a.db.Collection(snapshotapi.CheckpointsCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "orders-view-g2/orders/p1"}, {Key: "seq", Value: int64(40)}})
	require.NoError(t, err)
	assert.Equal(t, 200, a.get("/v1/views/orders/k?after=1:40").StatusCode)
	assert.Equal(t, 503, a.get("/v1/views/orders/k?after=1:41&wait=10ms").StatusCode)
}

// TestReady: ready once every sort field leads an index of the live collection.
func TestReady(t *testing.T) {
	ctx := context.Background()
	a := newAPI(t, false)
	err := a.srv.Ready(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "view orders: no index")
	_, err = a.db.Collection("orders").Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "created", Value: -1}, {Key: "status", Value: 1}}}, {Keys: bson.D{{Key: "rank", Value: 1}}},
	})
	require.NoError(t, err)
	require.NoError(t, a.srv.Ready(ctx))
}

// TestMetrics: requests by route and status, latency, conditional results and cache lookups.
func TestMetrics(t *testing.T) {
	a := newAPI(t, false)
	a.put("orders", doc("k", 1, t0, nil))
	etag := a.get("/v1/views/orders/k").Header.Get("ETag")
	a.get("/v1/views/orders/k", "If-None-Match", etag)
	a.get("/v1/views/orders/k", "If-None-Match", `"x"`)
	a.get("/v1/views/orders?limit=0")
	a.get("/v1/views/nope")
	// Labels in the order Prometheus sorts them: code, route, view; route, result.
	assert.Equal(t, 2.0, metric(t, a, "snapshotapi_requests_total", "200", "/v1/views/:view/:key", "orders"))
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_requests_total", "304", "/v1/views/:view/:key", "orders"))
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_requests_total", "400", "/v1/views/:view", "orders"))
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_requests_total", "404", "/v1/views/:view", ""))
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_conditional_requests_total", "not_modified", "/v1/views/:view/:key"))
	assert.Equal(t, 1.0, metric(t, a, "snapshotapi_conditional_requests_total", "modified", "/v1/views/:view/:key"))
	n, err := testutil.GatherAndCount(a.reg, "snapshotapi_request_duration_seconds")
	require.NoError(t, err)
	assert.Positive(t, n)
}

// metric returns the value of a counter series in the API's registry (0 when absent).
func metric(t *testing.T, a *api, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(labels) || lp.GetValue() != labels[i] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
