package snapshotapi_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/snapshotapi"
)

var jwtSecret = []byte("a shared secret of at least 32 bytes!")

func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	require.NoError(t, err)
	return "Bearer " + s
}

func claims(views any, mods ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "iss": "https://auth.example.com/", "aud": "jetbus",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "views": views}
	for _, m := range mods {
		m(c)
	}
	return c
}

// TestAuth: 401 for no, a malformed, an unknown, an invalid or an expired token, with an RFC
// 6750 challenge; 403 for a valid token without the view in its scope.
func TestAuth(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tokens := []snapshotapi.Token{{Name: "dashboard", Token: "tok-dash", Views: []string{"orders"}}, {Name: "ops", Token: "tok-all", Views: []string{"*"}}}
	hs := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.Tokens = tokens
		c.JWT = snapshotapi.JWT{HS256Secret: jwtSecret, Issuer: "https://auth.example.com/", Audience: "jetbus"}
	}))
	rs := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.JWT = snapshotapi.JWT{RS256PublicKey: &rsaKey.PublicKey} }))
	for _, a := range []*api{hs, rs} {
		a.put("orders", doc("o1", 1, t0, bson.D{{Key: "status", Value: "paid"}}))
	}
	hsTok := func(views any, mods ...func(jwt.MapClaims)) string {
		return signed(t, jwt.SigningMethodHS256, jwtSecret, claims(views, mods...))
	}
	rsTok := func(key *rsa.PrivateKey, views any, mods ...func(jwt.MapClaims)) string {
		return signed(t, jwt.SigningMethodRS256, key, claims(views, mods...))
	}
	unsigned, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims([]string{"*"})).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)

	cases := []struct {
		name   string
		a      *api
		path   string
		auth   []string
		status int
		header string // WWW-Authenticate
	}{
		{"no token", hs, "/v1/views/orders/o1", nil, 401, `Bearer realm="jetbus"`},
		{"not bearer", hs, "/v1/views/orders/o1", []string{"Basic dG9rLWRhc2g6"}, 401, `Bearer realm="jetbus", error="invalid_request"`},
		{"bearer without token", hs, "/v1/views/orders/o1", []string{"Bearer "}, 401, `Bearer realm="jetbus", error="invalid_request"`},
		{"two Authorization fields", hs, "/v1/views/orders/o1", []string{"Bearer tok-dash", "Bearer tok-all"}, 401, `Bearer realm="jetbus", error="invalid_request"`},
		{"unknown token", hs, "/v1/views/orders/o1", []string{"Bearer tok-nope"}, 401, `Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"static token in scope", hs, "/v1/views/orders/o1", []string{"Bearer tok-dash"}, 200, ""},
		{"static token, lowercase scheme", hs, "/v1/views/orders/o1", []string{"bearer tok-dash"}, 200, ""},
		{"static token out of scope", hs, "/v1/views/slim/o1", []string{"Bearer tok-dash"}, 403, `Bearer realm="jetbus", error="insufficient_scope", scope="slim"`},
		{"static token for every view", hs, "/v1/views/slim/o1", []string{"Bearer tok-all"}, 200, ""},
		{"list in scope", hs, "/v1/views/orders", []string{"Bearer tok-dash"}, 200, ""},
		{"list out of scope", hs, "/v1/views/slim", []string{"Bearer tok-dash"}, 403, `Bearer realm="jetbus", error="insufficient_scope", scope="slim"`},
		{"JWT in scope", hs, "/v1/views/orders/o1", []string{hsTok([]string{"orders"})}, 200, ""},
		{"JWT out of scope", hs, "/v1/views/slim/o1", []string{hsTok([]string{"orders"})}, 403, `Bearer realm="jetbus", error="insufficient_scope", scope="slim"`},
		{"JWT scope as a string", hs, "/v1/views/slim/o1", []string{hsTok("orders slim")}, 200, ""},
		{"JWT for every view", hs, "/v1/views/slim/o1", []string{hsTok("*")}, 200, ""},
		{"JWT without scope", hs, "/v1/views/orders/o1", []string{hsTok(nil)}, 403, `Bearer realm="jetbus", error="insufficient_scope", scope="orders"`},
		{"JWT expired", hs, "/v1/views/orders/o1", []string{hsTok("*", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token has expired"`},
		{"JWT without exp", hs, "/v1/views/orders/o1", []string{hsTok("*", func(c jwt.MapClaims) { delete(c, "exp") })}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token lacks a required claim (exp)"`},
		{"JWT not valid yet", hs, "/v1/views/orders/o1", []string{hsTok("*", func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid yet"`},
		{"JWT of another issuer", hs, "/v1/views/orders/o1", []string{hsTok("*", func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com/" })}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token's issuer is not accepted"`},
		{"JWT for another audience", hs, "/v1/views/orders/o1", []string{hsTok("*", func(c jwt.MapClaims) { c["aud"] = "billing" })}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not meant for this API (audience)"`},
		{"JWT with another secret", hs, "/v1/views/orders/o1", []string{signed(t, jwt.SigningMethodHS256, []byte("another secret, 32 bytes long!!!"), claims("*"))}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"JWT with alg none", hs, "/v1/views/orders/o1", []string{"Bearer " + unsigned}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"JWT signed RS256 for an HS256 API", hs, "/v1/views/orders/o1", []string{rsTok(rsaKey, "*", func(c jwt.MapClaims) {})}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"RS256 JWT in scope", rs, "/v1/views/orders/o1", []string{rsTok(rsaKey, []string{"orders"})}, 200, ""},
		{"RS256 JWT with another key", rs, "/v1/views/orders/o1", []string{rsTok(otherRSA, []string{"orders"})}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"HS256 JWT for an RS256 API (algorithm confusion)", rs, "/v1/views/orders/o1", []string{hsTok("*")}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"RS256 API has no static tokens", rs, "/v1/views/orders/o1", []string{"Bearer tok-dash"}, 401,
			`Bearer realm="jetbus", error="invalid_token", error_description="the token is not valid"`},
		{"an undeclared view, authenticated", hs, "/v1/views/nope/o1", []string{"Bearer tok-all"}, 404, ""},
		{"an undeclared view, anonymous", hs, "/v1/views/nope/o1", nil, 401, `Bearer realm="jetbus"`},
		{"the OpenAPI document is public", hs, "/openapi.json", nil, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			for _, v := range tc.auth {
				h = append(h, "Authorization", v)
			}
			r := tc.a.get(tc.path, h...)
			require.Equal(t, tc.status, r.StatusCode, "%s", r.body)
			assert.Equal(t, tc.header, r.Header.Get("WWW-Authenticate"))
			switch tc.status {
			case 401:
				assert.Equal(t, "unauthorized", r.errorCode(t))
			case 403:
				assert.Equal(t, "forbidden", r.errorCode(t))
			}
		})
	}
}

// TestCORS: allowed origins get the CORS headers (a preflight needs no token), others none.
func TestCORS(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.CORSOrigins = []string{"https://app.example.com"}
		c.Tokens = []snapshotapi.Token{{Token: "tok", Views: []string{"*"}}}
	}))
	a.put("orders", doc("o1", 1, t0, nil))
	a.noSpec = true // a preflight is the CORS protocol's, not an operation of the document
	pre := a.do(http.MethodOptions, "/v1/views/orders/o1", "Origin", "https://app.example.com",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization, if-none-match")
	a.noSpec = false
	assert.Equal(t, http.StatusNoContent, pre.StatusCode)
	assert.Equal(t, "https://app.example.com", pre.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, pre.Header.Get("Access-Control-Allow-Methods"), "GET")
	assert.Contains(t, pre.Header.Get("Access-Control-Allow-Headers"), "If-None-Match")

	r := a.get("/v1/views/orders/o1", "Origin", "https://app.example.com", "Authorization", "Bearer tok")
	require.Equal(t, 200, r.StatusCode)
	assert.Equal(t, "https://app.example.com", r.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, r.Header.Get("Access-Control-Expose-Headers"), "ETag")
	assert.Contains(t, r.Header.Values("Vary"), "Origin")

	r = a.get("/v1/views/orders/o1", "Origin", "https://evil.example.com", "Authorization", "Bearer tok")
	require.Equal(t, 200, r.StatusCode)
	assert.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))
}

// TestErrorsNameOnlyWhatTheScopeMaySee: an unknown view's 404 lists the views the token may
// read, not every declared one; a MongoDB outage says nothing of the backend.
func TestErrorsNameOnlyWhatTheScopeMaySee(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) {
		c.Tokens = []snapshotapi.Token{{Token: "orders-token", Views: []string{"orders"}}, {Token: "all-token", Views: []string{"*"}}}
	}))
	r := a.get("/v1/views/nope/k", "Authorization", "Bearer orders-token")
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	assert.Equal(t, snapshotapi.CodeUnknownView, r.errorCode(t))
	details := r.json(t)["error"].(map[string]any)["details"].(map[string]any)
	assert.Equal(t, []any{"orders"}, details["views"], "slim is not the token's to know of")
	r = a.get("/v1/views/nope/k", "Authorization", "Bearer all-token")
	details = r.json(t)["error"].(map[string]any)["details"].(map[string]any)
	assert.Equal(t, []any{"orders", "slim"}, details["views"])
}
