package snapshotapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

const ordersToken = "orders-token-0123456789"

func withTokens(c *snapshotapi.Config) {
	c.Tokens = []snapshotapi.Token{{Name: "app", Token: ordersToken, Views: []string{"orders"}},
		{Name: "all", Token: "all-token-0123456789", Views: []string{"*"}}}
}

// postTicket asks for a ticket; headers as name, value pairs.
func (a *api) postTicket(body string, headers ...string) response {
	a.t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.http.URL+"/v1/tickets", bytes.NewBufferString(body))
	require.NoError(a.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := plainTransport.RoundTrip(req)
	require.NoError(a.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(a.t, err)
	r := response{res, b}
	a.validate(req, r)
	return r
}

// TestTickets: a browser's EventSource cannot send Authorization: with its bearer token a
// client gets a short-lived ticket for the views it names, and watches with ?ticket= (any
// replica accepts it); a ticket opens watches of its views only, and nothing else.
func TestTickets(t *testing.T) {
	a := newAPI(t, false, withConfig(withTokens), withConfig(func(c *snapshotapi.Config) { c.TicketTTL = time.Minute }))
	a.set("orders", "a", 1, bson.D{{Key: "status", Value: "paid"}})
	json := []string{"Content-Type", "application/json", "Authorization", "Bearer " + ordersToken}
	r := a.postTicket(`{"views":["orders"]}`, json...)
	require.Equal(t, http.StatusCreated, r.StatusCode, "%s", r.body)
	assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	m := r.json(t)
	ticket := m["ticket"].(string)
	require.Regexp(t, `^[A-Za-z0-9_-]+$`, ticket)
	assert.Equal(t, []any{"orders"}, m["views"])
	exp, err := time.Parse(time.RFC3339Nano, m["expires"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute), exp, 5*time.Second)

	s := a.watch("/v1/views/orders?watch=true&status=eq.paid&ticket=" + ticket)
	assert.Equal(t, "a", s.next().payload(t).Key)

	uri := embeddedtest.MongoURI(t)
	t.Run("any replica accepts it", func(t *testing.T) {
		other := newAPIAt(t, uri, a.db, false, withConfig(withTokens))
		s := other.watch("/v1/views/orders?watch=true&ticket=" + ticket)
		assert.Equal(t, "upsert", s.next().event)
	})

	altered := alterMiddle(t, ticket)
	refusals := []struct {
		name    string
		path    string
		headers []string
		status  int
		code    string
	}{
		{"another view", "/v1/views/slim?watch=true&ticket=" + ticket, nil, 403, "forbidden"},
		{"an altered ticket", "/v1/views/orders?watch=true&ticket=" + altered, nil, 401, "unauthorized"},
		{"not a ticket", "/v1/views/orders?watch=true&ticket=" + ordersToken, nil, 401, "unauthorized"},
		{"a ticket and a token", "/v1/views/orders?watch=true&ticket=" + ticket, []string{"Authorization", "Bearer " + ordersToken}, 400, "bad_query"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, r := a.openWatch(tc.path, tc.headers...)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.code, r.errorCode(t))
			assert.NotContains(t, string(r.body), ticket, "a ticket is never echoed")
		})
	}
	t.Run("a watch only", func(t *testing.T) {
		for _, path := range []string{"/v1/views/orders?ticket=" + ticket, "/v1/views/orders/a?ticket=" + ticket} {
			r := a.get(path)
			assert.Equal(t, 401, r.StatusCode, "%s: a ticket is no bearer token", path)
			r = a.get(path, "Authorization", "Bearer "+ordersToken)
			assert.Equal(t, 400, r.StatusCode, "%s", path)
		}
	})

	issue := []struct {
		name    string
		body    string
		headers []string
		status  int
		code    string
	}{
		{"no token", `{"views":["orders"]}`, []string{"Content-Type", "application/json"}, 401, "unauthorized"},
		{"a view outside the token's scope", `{"views":["orders","slim"]}`, json, 403, "forbidden"},
		{"an unknown view", `{"views":["nope"]}`, json, 404, "unknown_view"},
		{"no views", `{"views":[]}`, json, 400, "bad_body"},
		{"not JSON", `views=orders`, json, 400, "bad_body"},
		{"an unknown field", `{"views":["orders"],"ttl":"1h"}`, json, 400, "bad_body"},
		{"two objects", `{"views":["orders"]}{}`, json, 400, "bad_body"},
		{"another type", `{"views":["orders"]}`, []string{"Content-Type", "text/plain", "Authorization", "Bearer " + ordersToken}, 415, "bad_body"},
		{"too large", `{"views":["` + string(bytes.Repeat([]byte("o"), 2000)) + `"]}`, json, 413, "body_too_large"},
	}
	for _, tc := range issue {
		t.Run("issue: "+tc.name, func(t *testing.T) {
			r := a.postTicket(tc.body, tc.headers...)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.code, r.errorCode(t))
		})
	}
	t.Run("GET /v1/tickets", func(t *testing.T) {
		r := a.get("/v1/tickets", "Authorization", "Bearer "+ordersToken)
		assert.Equal(t, 405, r.StatusCode)
		assert.Equal(t, "POST", r.Header.Get("Allow"))
	})
}

// TestTicketExpires: a ticket past its life opens no watch (401, get a new one); a watch it
// opened goes on.
func TestTicketExpires(t *testing.T) {
	a := newAPI(t, false, withConfig(withTokens), withConfig(func(c *snapshotapi.Config) { c.TicketTTL = 200 * time.Millisecond }))
	// A ticket lives 200 ms here: on a machine short of CPU the first watch may open later than
	// that, and is then refused as any expired ticket is. Another ticket is issued until one
	// opens its watch in time.
	var s *stream
	var m struct{ Ticket string }
	for deadline := time.Now().Add(10 * time.Second); s == nil; {
		require.True(t, time.Now().Before(deadline), "no watch opened within its ticket's life")
		r := a.postTicket(`{"views":["orders"]}`, "Content-Type", "application/json", "Authorization", "Bearer "+ordersToken)
		require.Equal(t, 201, r.StatusCode)
		require.NoError(t, json.Unmarshal(r.body, &m))
		var late response
		if s, late = a.openWatch("/v1/views/orders?watch=true&ticket=" + url.QueryEscape(m.Ticket)); s == nil {
			require.Equal(t, 401, late.StatusCode, "%s", late.body)
		}
	}
	require.Equal(t, "synced", s.next().event)
	var refused response
	eventually(t, func() bool {
		_, refused = a.openWatch("/v1/views/orders?watch=true&ticket=" + m.Ticket)
		return refused.Response != nil && refused.StatusCode == 401
	}, "refused once expired")
	assert.Contains(t, string(refused.body), "expired")
	assert.Contains(t, refused.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	a.set("orders", "late", 1, nil)
	assert.Equal(t, "late", s.next().payload(t).Key, "the stream outlives its ticket")
}
