package snapshotapi_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestTimeTravel reads a key's state at times on and around the boundaries of its history:
// the state at T is the version with the greatest (_ts, _v) such that _ts <= T.
func TestTimeTravel(t *testing.T) {
	ctx := context.Background()
	a := newAPI(t, false)
	w := &writer{db: a.db, coll: "orders", group: "orders-view", topic: "orders", keepHistory: true}
	t1 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	t2 := t1.Add(10 * time.Second)
	t3 := t2.Add(10 * time.Second)
	require.NoError(t, w.apply(ctx, "k", 10, t1, bson.D{{Key: "status", Value: "v10"}}))
	require.NoError(t, w.apply(ctx, "k", 11, t2, bson.D{{Key: "status", Value: "v11"}}))
	require.NoError(t, w.apply(ctx, "k", 12, t2, bson.D{{Key: "status", Value: "v12"}})) // same time, higher version
	require.NoError(t, w.apply(ctx, "k", 13, t3, nil))                                   // deleted
	require.NoError(t, w.apply(ctx, "k", 14, t3.Add(time.Second), bson.D{{Key: "status", Value: "v14"}}))

	rfc := func(t time.Time) string { return url.QueryEscape(t.UTC().Format(time.RFC3339Nano)) }
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	cases := []struct {
		name   string
		at     string
		status int
		want   string // status field, or error code
	}{
		{"1 ms before the first version", ms(t1.Add(-time.Millisecond)), 404, "not_found"},
		{"at the first version (Unix ms)", ms(t1), 200, "v10"},
		{"at the first version (RFC 3339)", rfc(t1), 200, "v10"},
		{"half a millisecond after it", rfc(t1.Add(500 * time.Microsecond)), 200, "v10"},
		{"in another time zone", url.QueryEscape(t1.In(time.FixedZone("X", 5*3600+1800)).Format(time.RFC3339Nano)), 200, "v10"},
		{"1 ms before the second time", ms(t2.Add(-time.Millisecond)), 200, "v10"},
		{"at the second time: the higher version wins", ms(t2), 200, "v12"},
		{"1 ms before the deletion", ms(t3.Add(-time.Millisecond)), 200, "v12"},
		{"at the deletion", ms(t3), 404, "not_found"},
		{"recreated", ms(t3.Add(time.Second)), 200, "v14"},
		{"in the future", ms(time.Now().Add(time.Hour)), 200, "v14"},
		{"older than the retention", ms(time.Now().Add(-25 * time.Hour)), 422, "history_expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.get("/v1/views/orders/k?at=" + tc.at)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			if tc.status != 200 {
				assert.Equal(t, tc.want, r.errorCode(t))
				return
			}
			assert.Equal(t, tc.want, r.json(t)["status"])
			assert.Equal(t, "k", r.json(t)["_id"])
		})
	}

	t.Run("the version's ETag and Last-Modified, as when it was live", func(t *testing.T) {
		r := a.get("/v1/views/orders/k?meta=1&at=" + ms(t2))
		require.Equal(t, 200, r.StatusCode)
		assert.JSONEq(t, fmt.Sprintf(`{"_id":"k","_v":12,"_ts":%q,"status":"v12"}`, t2.UTC().Format("2006-01-02T15:04:05.000Z")), string(r.body))
		assert.Equal(t, t2.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), r.Header.Get("Last-Modified"))
		live := a.get("/v1/views/orders/k?meta=1")
		assert.Regexp(t, `^"12-`, r.Header.Get("ETag"))
		assert.Equal(t, r.Header.Get("ETag")[3:], live.Header.Get("ETag")[3:], "the same view tag")
		again := a.get("/v1/views/orders/k?meta=1&at="+ms(t2), "If-None-Match", r.Header.Get("ETag"))
		assert.Equal(t, 304, again.StatusCode)
	})
	t.Run("a view without history", func(t *testing.T) {
		r := a.get("/v1/views/slim/k?at=" + ms(t2))
		require.Equal(t, 422, r.StatusCode)
		assert.Equal(t, "no_history", r.errorCode(t))
	})
	t.Run("a key with no history", func(t *testing.T) {
		r := a.get("/v1/views/orders/nobody?at=" + ms(t2))
		require.Equal(t, 404, r.StatusCode)
		assert.Equal(t, "not_found", r.errorCode(t))
	})
}
