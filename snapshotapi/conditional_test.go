package snapshotapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 250e6, time.UTC)

// TestConditionalRequests checks RFC 9110 section 13 on one key, with and without the
// document cache: strong and weak comparison, lists of tags, *, HEAD, what a 304 carries,
// and the precedence of If-Match over If-Unmodified-Since and of If-None-Match over
// If-Modified-Since.
func TestConditionalRequests(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "from MongoDB", true: "from the cache"}[cached], func(t *testing.T) {
			a := newAPI(t, cached)
			a.put("orders", doc("o1", 7, t0, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: 12.5}}))
			first := a.get("/v1/views/orders/o1")
			require.Equal(t, http.StatusOK, first.StatusCode, "%s", first.body)
			etag := first.Header.Get("ETag")
			require.Regexp(t, `^"7-[0-9a-f]{8}"$`, etag)
			assert.Equal(t, "Sun, 01 Mar 2026 10:00:00 GMT", first.Header.Get("Last-Modified"))
			assert.Equal(t, "max-age=5", first.Header.Get("Cache-Control"))
			assert.Contains(t, first.Header.Values("Vary"), "Accept-Encoding")
			assert.Equal(t, "application/json", first.Header.Get("Content-Type"))
			assert.JSONEq(t, `{"_id":"o1","status":"paid","total":12.5}`, string(first.body))
			if cached {
				eventually(t, func() bool {
					n := a.findCount()
					a.get("/v1/views/orders/o1")
					return a.findCount() == n
				}, "a repeated read is answered from the cache")
			}

			weak := "W/" + etag
			gzTag := strings.TrimSuffix(etag, `"`) + `-gz"`
			lastMod := "Sun, 01 Mar 2026 10:00:00 GMT"
			earlier := "Sun, 01 Mar 2026 09:59:59 GMT"
			later := "Sun, 01 Mar 2026 10:00:01 GMT"
			cases := []struct {
				name    string
				method  string
				headers []string
				status  int
				etag    string // expected ETag, when not etag
			}{
				{"no validators", "GET", nil, 200, ""},
				{"If-None-Match: the tag", "GET", []string{"If-None-Match", etag}, 304, ""},
				{"If-None-Match: the weak form of the tag (weak comparison)", "GET", []string{"If-None-Match", weak}, 304, ""},
				{"If-None-Match: a list holding the tag", "GET", []string{"If-None-Match", `"other", ` + etag + `, W/"x"`}, 304, ""},
				{"If-None-Match: over two field lines", "GET", []string{"If-None-Match", `"other"`, "If-None-Match", etag}, 304, ""},
				{"If-None-Match: another tag", "GET", []string{"If-None-Match", `"6-00000000"`}, 200, ""},
				{"If-None-Match: *", "GET", []string{"If-None-Match", "*"}, 304, ""},
				{"If-None-Match: an empty list", "GET", []string{"If-None-Match", " , "}, 200, ""},
				{"If-None-Match wins over If-Modified-Since (match)", "GET", []string{"If-None-Match", etag, "If-Modified-Since", earlier}, 304, ""},
				{"If-Modified-Since is ignored with If-None-Match", "GET", []string{"If-None-Match", `"x"`, "If-Modified-Since", later}, 200, ""},
				{"If-Modified-Since: the Last-Modified", "GET", []string{"If-Modified-Since", lastMod}, 304, ""},
				{"If-Modified-Since: later", "GET", []string{"If-Modified-Since", later}, 304, ""},
				{"If-Modified-Since: earlier", "GET", []string{"If-Modified-Since", earlier}, 200, ""},
				{"If-Modified-Since: not a date is ignored", "GET", []string{"If-Modified-Since", "yesterday"}, 200, ""},
				{"If-Match: the tag", "GET", []string{"If-Match", etag}, 200, ""},
				{"If-Match: *", "GET", []string{"If-Match", "*"}, 200, ""},
				{"If-Match: another tag", "GET", []string{"If-Match", `"1-00000000"`}, 412, "none"},
				{"If-Match: the weak tag fails strong comparison", "GET", []string{"If-Match", weak}, 412, "none"},
				{"If-Unmodified-Since: earlier", "GET", []string{"If-Unmodified-Since", earlier}, 412, "none"},
				{"If-Unmodified-Since: the Last-Modified", "GET", []string{"If-Unmodified-Since", lastMod}, 200, ""},
				{"If-Unmodified-Since is ignored with If-Match", "GET", []string{"If-Match", etag, "If-Unmodified-Since", earlier}, 200, ""},
				{"If-Match holds, If-None-Match matches", "GET", []string{"If-Match", etag, "If-None-Match", etag}, 304, ""},
				{"HEAD without validators", "HEAD", nil, 200, ""},
				{"HEAD If-None-Match: the tag", "HEAD", []string{"If-None-Match", etag}, 304, ""},
				{"HEAD If-Modified-Since", "HEAD", []string{"If-Modified-Since", lastMod}, 304, ""},
				{"gzip: the identity tag does not match the gzip representation", "GET", []string{"Accept-Encoding", "gzip", "If-None-Match", etag}, 200, gzTag},
				{"gzip: its own tag", "GET", []string{"Accept-Encoding", "gzip", "If-None-Match", gzTag}, 304, gzTag},
				{"gzip refused with q=0", "GET", []string{"Accept-Encoding", "gzip;q=0, identity", "If-None-Match", etag}, 304, ""},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					r := a.do(tc.method, "/v1/views/orders/o1", tc.headers...)
					require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
					want := etag
					if tc.etag != "" {
						want = tc.etag
					}
					if tc.etag == "none" {
						assert.Equal(t, "precondition_failed", r.errorCode(t))
						return
					}
					assert.Equal(t, want, r.Header.Get("ETag"))
					assert.Equal(t, "max-age=5", r.Header.Get("Cache-Control"))
					assert.Contains(t, r.Header.Values("Vary"), "Accept-Encoding")
					switch {
					case tc.status == 304:
						// RFC 9110 15.4.5: ETag, Cache-Control and Vary as a 200 would have;
						// no representation metadata.
						assert.Empty(t, r.Header.Get("Last-Modified"))
						assert.Empty(t, r.Header.Get("Content-Type"))
						assert.Empty(t, r.body)
					case tc.method == "HEAD":
						assert.Equal(t, lastMod, r.Header.Get("Last-Modified"))
						assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
						assert.Empty(t, r.body)
					default:
						assert.Equal(t, lastMod, r.Header.Get("Last-Modified"))
						assert.JSONEq(t, `{"_id":"o1","status":"paid","total":12.5}`, string(r.body))
					}
				})
			}

			t.Run("malformed validators are a 400", func(t *testing.T) {
				for _, h := range []string{`abc`, `"a" *`, `"a`, `W/`, `"a" "b"`, `*, *x`} {
					r := a.get("/v1/views/orders/o1", "If-None-Match", h)
					require.Equal(t, 400, r.StatusCode, "If-None-Match %q: %s", h, r.body)
					assert.Equal(t, "bad_header", r.errorCode(t))
					r = a.get("/v1/views/orders/o1", "If-Match", h)
					require.Equal(t, 400, r.StatusCode, "If-Match %q", h)
				}
			})
			t.Run("a missing key ignores preconditions (404)", func(t *testing.T) {
				for _, h := range []string{"If-None-Match", "If-Match"} {
					r := a.get("/v1/views/orders/nope", h, "*")
					require.Equal(t, 404, r.StatusCode)
					assert.Equal(t, "not_found", r.errorCode(t))
					assert.Empty(t, r.Header.Get("ETag"))
				}
			})
			t.Run("meta is another representation", func(t *testing.T) {
				r := a.get("/v1/views/orders/o1?meta=1", "If-None-Match", etag)
				require.Equal(t, 200, r.StatusCode)
				assert.NotEqual(t, etag, r.Header.Get("ETag"))
				assert.JSONEq(t, `{"_id":"o1","_v":7,"_ts":"2026-03-01T10:00:00.250Z","status":"paid","total":12.5}`, string(r.body))
			})
			t.Run("another view's configuration is another representation", func(t *testing.T) {
				r := a.get("/v1/views/slim/o1", "If-None-Match", etag)
				require.Equal(t, 200, r.StatusCode)
				assert.NotEqual(t, etag, r.Header.Get("ETag"))
				assert.JSONEq(t, `{"_id":"o1","status":"paid"}`, string(r.body))
			})
			t.Run("a new version changes the tag", func(t *testing.T) {
				a.put("orders", doc("o1", 8, t0.Add(time.Minute), bson.D{{Key: "status", Value: "shipped"}}))
				eventually(t, func() bool {
					return a.get("/v1/views/orders/o1", "If-None-Match", etag).StatusCode == 200
				}, "the old tag stops matching")
				r := a.get("/v1/views/orders/o1", "If-None-Match", etag)
				assert.Regexp(t, `^"8-`, r.Header.Get("ETag"))
				assert.JSONEq(t, `{"_id":"o1","status":"shipped"}`, string(r.body))
			})
		})
	}
}
