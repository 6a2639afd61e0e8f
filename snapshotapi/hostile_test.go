package snapshotapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/snapshotapi"
)

// TestHostileQueries: whatever a client puts in a path, query string or header answers 400
// (or the 4xx that fits) in the error shape, and reaches MongoDB not at all.
func TestHostileQueries(t *testing.T) {
	a := newAPI(t, false)
	a.put("orders", doc("o1", 1, t0, bson.D{{Key: "status", Value: "paid"}, {Key: "created", Value: bson.NewDateTimeFromTime(t0)}}))
	// A cursor this API issued for status=eq.paid, and others to tamper with.
	page := a.get("/v1/views/orders?status=eq.paid&limit=1&order=created.asc")
	require.Equal(t, 200, page.StatusCode, "%s", page.body)
	a.put("orders", doc("o2", 1, t0, bson.D{{Key: "status", Value: "paid"}, {Key: "created", Value: bson.NewDateTimeFromTime(t0.Add(time.Second))}}))
	page = a.get("/v1/views/orders?status=eq.paid&limit=1&order=created.asc")
	cursor := page.json(t)["next"].(string)
	require.NotEmpty(t, cursor)
	other := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.CursorKey = []byte(strings.Repeat("k", 32)) }))
	other.put("orders", doc("a", 1, t0, nil), doc("b", 1, t0, nil))
	foreign := other.get("/v1/views/orders?limit=1").json(t)["next"].(string)
	flipped := alterMiddle(t, cursor)
	many := "in.(" + strings.Repeat("a,", 100) + "a)"

	cases := []struct {
		name, path string
		status     int
		code       string
		headers    []string
	}{
		{"$-prefixed parameter", "/v1/views/orders?$where=1", 400, "bad_query", nil},
		{"$or parameter", "/v1/views/orders?$or=x", 400, "bad_query", nil},
		{"bracket operator form", "/v1/views/orders?status[$ne]=x", 400, "bad_query", nil},
		{"bracket operator form, encoded", "/v1/views/orders?status%5B%24ne%5D=x", 400, "bad_query", nil},
		{"bracket form, Rails style", "/v1/views/orders?status[]=x", 400, "bad_query", nil},
		{"dotted path below a declared field", "/v1/views/orders?status.$gt=", 400, "bad_query", nil},
		{"dotted path to an undeclared field", "/v1/views/orders?customer.name=eq.x", 400, "bad_query", nil},
		{"parent of a declared dotted field", "/v1/views/orders?customer=eq.x", 400, "bad_query", nil},
		{"undeclared field", "/v1/views/orders?secret=eq.x", 400, "bad_query", nil},
		{"_id is not a filter", "/v1/views/orders?_id=eq.x", 400, "bad_query", nil},
		{"internal field", "/v1/views/orders?_deleted=eq.true", 400, "bad_query", nil},
		{"$-prefixed operator", "/v1/views/orders?status=$ne.x", 400, "bad_query", nil},
		{"unknown operator", "/v1/views/orders?status=regex.^a", 400, "bad_query", nil},
		{"no operator", "/v1/views/orders?status=paid", 400, "bad_query", nil},
		{"number: not a number", "/v1/views/orders?total=eq.abc", 400, "bad_query", nil},
		{"number: NaN", "/v1/views/orders?total=eq.NaN", 400, "bad_query", nil},
		{"number: infinite", "/v1/views/orders?total=gt.1e999", 400, "bad_query", nil},
		{"number: hex", "/v1/views/orders?total=eq.0x10", 400, "bad_query", nil},
		{"number: an operator document", `/v1/views/orders?total=eq.{"$gt":0}`, 400, "bad_query", nil},
		{"bool: yes", "/v1/views/orders?paid=eq.yes", 400, "bad_query", nil},
		{"time: words", "/v1/views/orders?created=gt.yesterday", 400, "bad_query", nil},
		{"prefix on a number", "/v1/views/orders?total=prefix.1", 400, "bad_query", nil},
		{"prefix with NUL", "/v1/views/orders?status=prefix.a%00", 400, "bad_query", nil},
		{"in without parentheses", "/v1/views/orders?status=in.a,b", 400, "bad_query", nil},
		{"in empty", "/v1/views/orders?status=in.()", 400, "bad_query", nil},
		{"in unclosed quote", `/v1/views/orders?status=in.("a)`, 400, "bad_query", nil},
		{"in with 101 values", "/v1/views/orders?status=" + many, 400, "bad_query", nil},
		{"in of wrong type", "/v1/views/orders?total=in.(1,x)", 400, "bad_query", nil},
		{"17 conditions", "/v1/views/orders?" + strings.Repeat("total=gt.1&", 17), 400, "bad_query", nil},
		{"huge limit", "/v1/views/orders?limit=1000000000000", 400, "bad_query", nil},
		{"limit over max", "/v1/views/orders?limit=101", 400, "bad_query", nil},
		{"limit zero", "/v1/views/orders?limit=0", 400, "bad_query", nil},
		{"limit negative", "/v1/views/orders?limit=-1", 400, "bad_query", nil},
		{"limit in exponent form", "/v1/views/orders?limit=1e2", 400, "bad_query", nil},
		{"limit twice", "/v1/views/orders?limit=1&limit=2", 400, "bad_query", nil},
		{"order by an unsortable field", "/v1/views/orders?order=total.asc", 400, "bad_query", nil},
		{"order by $natural", "/v1/views/orders?order=$natural.asc", 400, "bad_query", nil},
		{"order without direction", "/v1/views/orders?order=created", 400, "bad_query", nil},
		{"cursor: garbage", "/v1/views/orders?cursor=garbage", 400, "bad_cursor", nil},
		{"cursor: not base64", "/v1/views/orders?cursor=%24%24%24", 400, "bad_cursor", nil},
		{"cursor: one bit flipped", "/v1/views/orders?status=eq.paid&limit=1&order=created.asc&cursor=" + flipped, 400, "bad_cursor", nil},
		{"cursor: truncated", "/v1/views/orders?status=eq.paid&limit=1&order=created.asc&cursor=" + cursor[:len(cursor)-3], 400, "bad_cursor", nil},
		{"cursor: another query's", "/v1/views/orders?status=eq.open&limit=1&order=created.asc&cursor=" + cursor, 400, "bad_cursor", nil},
		{"cursor: another order's", "/v1/views/orders?status=eq.paid&limit=1&order=created.desc&cursor=" + cursor, 400, "bad_cursor", nil},
		{"cursor: another view's", "/v1/views/slim?status=eq.paid&limit=1&order=created.asc&cursor=" + cursor, 400, "bad_cursor", nil},
		{"cursor: another key's", "/v1/views/orders?limit=1&cursor=" + foreign, 400, "bad_cursor", nil},
		{"cursor: 10 kB", "/v1/views/orders?cursor=" + strings.Repeat("A", 3000), 400, "bad_cursor", nil},
		{"10 kB query string", "/v1/views/orders?status=eq." + strings.Repeat("a", 10<<10), 400, "query_too_long", nil},
		{"10 kB of parameters", "/v1/views/orders?" + strings.Repeat("a=1&", 2560), 400, "query_too_long", nil},
		{"10 kB query string on a key", "/v1/views/orders/o1?" + strings.Repeat("a", 10<<10), 400, "query_too_long", nil},
		{"bad percent-encoding", "/v1/views/orders?status=eq.%zz", 400, "bad_query", nil},
		{"semicolon separator", "/v1/views/orders?status=eq.a;limit=1", 400, "bad_query", nil},
		{"invalid UTF-8 value", "/v1/views/orders?status=eq.%ff", 400, "bad_query", nil},
		{"nameless parameter", "/v1/views/orders?=x", 400, "bad_query", nil},
		{"meta: yes", "/v1/views/orders?meta=yes", 400, "bad_query", nil},
		{"after: not a position", "/v1/views/orders?after=x", 400, "bad_query", nil},
		{"after: sequence 0", "/v1/views/orders?after=1:0", 400, "bad_query", nil},
		{"after: a partition the topic lacks", "/v1/views/orders?after=9:5", 400, "bad_query", nil},
		{"after: negative partition", "/v1/views/orders?after=-1:5", 400, "bad_query", nil},
		{"after: sequence overflow", "/v1/views/orders?after=1:99999999999999999999", 400, "bad_query", nil},
		{"after: 65 positions", "/v1/views/orders?after=" + strings.Repeat("1:1,", 64) + "1:1", 400, "bad_query", nil},
		{"wait without after", "/v1/views/orders?wait=1s", 400, "bad_query", nil},
		{"wait over 10s", "/v1/views/orders?after=0:1&wait=11s", 400, "bad_query", nil},
		{"wait negative", "/v1/views/orders?after=0:1&wait=-1s", 400, "bad_query", nil},
		{"at on a list", "/v1/views/orders?at=2026-01-01T00:00:00Z", 400, "bad_query", nil},
		{"key: unknown parameter", "/v1/views/orders/o1?status=eq.x", 400, "bad_query", nil},
		{"key: $-prefixed parameter", "/v1/views/orders/o1?$where=1", 400, "bad_query", nil},
		{"key: bad at", "/v1/views/orders/o1?at=soon", 400, "bad_query", nil},
		{"key: NUL", "/v1/views/orders/a%00b", 400, "bad_key", nil},
		{"key: newline", "/v1/views/orders/a%0Ab", 400, "bad_key", nil},
		{"key: not UTF-8", "/v1/views/orders/%ff", 400, "bad_key", nil},
		{"key: over 1024 bytes", "/v1/views/orders/" + strings.Repeat("k", 1025), 400, "bad_key", nil},
		{"key: empty (no route)", "/v1/views/orders/", 404, "not_found", nil},
		{"key: operator document", "/v1/views/orders/" + url.PathEscape(`{"$gt":""}`), 404, "not_found", nil},
		{"view: undeclared", "/v1/views/customers", 404, "unknown_view", nil},
		{"view: $-prefixed", "/v1/views/$where/x", 404, "unknown_view", nil},
		{"route: unknown", "/v1/nothing", 404, "not_found", nil},
		{"header fields: 20 kB", "/v1/views/orders", 431, "headers_too_large", []string{"X-Pad", strings.Repeat("p", 20<<10)}},
		{"If-None-Match: garbage", "/v1/views/orders/o1", 400, "bad_header", []string{"If-None-Match", "{$ne:1}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := a.findCount()
			r := a.get(tc.path, tc.headers...)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.code, r.errorCode(t))
			assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
			if tc.code != "not_found" {
				assert.Equal(t, before, a.findCount(), "the request reached MongoDB")
			}
		})
	}

	t.Run("a body is refused", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, a.http.URL+"/v1/views/orders", strings.NewReader(strings.Repeat("x", 4096)))
		require.NoError(t, err)
		res, err := plainTransport.RoundTrip(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)
	})
	t.Run("methods other than GET and HEAD", func(t *testing.T) {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			r := a.do(m, "/v1/views/orders/o1")
			require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode, m)
			assert.Equal(t, "method_not_allowed", r.errorCode(t))
			assert.Equal(t, "GET, HEAD", r.Header.Get("Allow"))
		}
	})
}

// alterMiddle returns s, a base64url token, with its middle character (whose six bits all
// count, unlike a last character's) changed to another one. Tokens carry a random nonce, so
// that character differs from run to run: the replacement differs from it whatever it is
// (flipping a bit of 'A' and mending the result with 'A' once gave the token back unchanged).
func alterMiddle(t *testing.T, s string) string {
	t.Helper()
	b := []byte(s)
	mid := len(b) / 2
	if b[mid] == 'A' {
		b[mid] = 'B'
	} else {
		b[mid] = 'A'
	}
	require.NotEqual(t, s, string(b))
	return string(b)
}

// TestOperatorLookalikeValues: values that look like MongoDB operators are values. They
// reach MongoDB only under the operator the grammar chose, never as one.
func TestOperatorLookalikeValues(t *testing.T) {
	a := newAPI(t, false)
	a.put("orders",
		doc("x1", 1, t0, bson.D{{Key: "status", Value: "$ne"}}),
		doc("x2", 1, t0, bson.D{{Key: "status", Value: `{"$gt":""}`}}),
		doc("x3", 1, t0, bson.D{{Key: "status", Value: ".*"}}),
		doc("x4", 1, t0, bson.D{{Key: "status", Value: "paid"}}),
	)
	cases := []struct {
		query string
		want  []string
	}{
		{"status=eq.$ne", []string{"x1"}},
		{"status=eq." + url.QueryEscape(`{"$gt":""}`), []string{"x2"}},
		{"status=in.($ne,$where)", []string{"x1"}},
		{"status=ne.$ne", []string{"x2", "x3", "x4"}},
		{"status=prefix..*", []string{"x3"}},
		{"status=prefix.$", []string{"x1"}},
		{"status=gt.$where", []string{"x2", "x3", "x4"}}, // binary order: { and . sort after $
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			before := a.findCount()
			r := a.get("/v1/views/orders?" + tc.query)
			require.Equal(t, 200, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.want, ids(t, r))
			a.mu.Lock()
			filters := a.finds[before:]
			a.mu.Unlock()
			for _, f := range filters {
				checkFilter(t, f, map[string]bool{"status": true, "_deleted": true, "_id": true})
			}
		})
	}
}

func ids(t *testing.T, r response) []string {
	t.Helper()
	var out []string
	for _, it := range r.json(t)["items"].([]any) {
		out = append(out, it.(map[string]any)["_id"].(string))
	}
	return out
}

var allowedOps = map[string]bool{"$and": true, "$or": true, "$eq": true, "$ne": true, "$gt": true, "$gte": true,
	"$lt": true, "$lte": true, "$in": true, "$nin": true, "$regex": true, "$type": true}

// checkFilter walks a find filter: every name is a declared field or an allowed operator,
// and every operator's operand is a scalar (or a list of scalars).
func checkFilter(t *testing.T, f bson.Raw, fields map[string]bool) {
	t.Helper()
	elems, err := f.Elements()
	require.NoError(t, err)
	for _, e := range elems {
		k := e.Key()
		switch {
		case k == "$and" || k == "$or":
			vals, err := e.Value().Array().Values()
			require.NoError(t, err)
			for _, v := range vals {
				checkFilter(t, v.Document(), fields)
			}
		case fields[k]:
			v := e.Value()
			if v.Type != bson.TypeEmbeddedDocument {
				continue // equality with a scalar
			}
			ops, err := v.Document().Elements()
			require.NoError(t, err)
			for _, op := range ops {
				require.True(t, allowedOps[op.Key()], "operator %s in %s", op.Key(), f)
				switch op.Value().Type {
				case bson.TypeEmbeddedDocument:
					t.Fatalf("an operand is a document: %s", f)
				case bson.TypeArray:
					vals, _ := op.Value().Array().Values()
					for _, x := range vals {
						require.NotEqual(t, bson.TypeEmbeddedDocument, x.Type, "%s", f)
					}
				}
			}
		default:
			t.Fatalf("filter names %q, neither a declared field nor an allowed operator: %s", k, fmt.Sprint(f))
		}
	}
}
