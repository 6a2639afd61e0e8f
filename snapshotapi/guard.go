package snapshotapi

import (
	"encoding/json"
	"net/http"
)

// ScopeOps is the scope a token needs for the operations endpoints (/v1/ops/status and
// /metrics) once tokens or JWTs are configured; "*" includes it. No view may be named so.
const ScopeOps = "ops"

// RequireScope returns middleware that serves only requests whose bearer token carries scope
// (or "*"): a static token of tokens, or a JWT that verifies as the API's do (Config.JWT,
// its defaults filled in). Other requests get 401 or 403 in the API's error shape, with an
// RFC 6750 challenge. With no tokens and no JWT it serves everyone: whether that is allowed
// is the configuration's decision (auth.open).
func RequireScope(tokens []Token, j JWT, scope string) (func(http.Handler) http.Handler, error) {
	c, err := Config{Tokens: tokens, JWT: j}.authDefaults()
	if err != nil {
		return nil, err
	}
	a := newAuthorizer(c)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, e := a.authenticate(r)
			if e == nil && !a.open && !p.may(scope) {
				e = newError(http.StatusForbidden, CodeForbidden, "the token's scope lacks %s", scope).
					withHeader("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+scope+`"`)
			}
			if e != nil {
				h := w.Header()
				for k, vs := range e.header {
					h[k] = vs
				}
				h.Set("Content-Type", "application/json")
				h.Set("Cache-Control", "no-store")
				h.Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(e.Status)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "details": map[string]any{}}})
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}
