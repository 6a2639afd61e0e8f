package snapshotapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Access control. A request without credentials, or with a token that is neither a
// configured static token nor a JWT that verifies (signature, exp, nbf, iss, aud), gets 401
// with a WWW-Authenticate challenge (RFC 6750); a valid token whose scope lacks the view gets
// 403 (error="insufficient_scope"). Static tokens are compared by their SHA-256 in constant
// time. JWTs must carry exp: a token that never expires is a static token's job.

const realm = `Bearer realm="jetbus"`

type staticToken struct {
	sum   [32]byte
	name  string
	views []string
}

type authorizer struct {
	open   bool
	tokens []staticToken
	parser *jwt.Parser
	key    any
	claim  string
}

// principal is who a request authenticated as: the views it may read.
type principal struct {
	name  string
	views []string
}

func (p principal) may(view string) bool {
	return slices.Contains(p.views, "*") || slices.Contains(p.views, view)
}

func newAuthorizer(c Config) *authorizer {
	a := &authorizer{open: len(c.Tokens) == 0 && !c.JWT.enabled(), claim: c.JWT.ScopeClaim}
	for _, t := range c.Tokens {
		a.tokens = append(a.tokens, staticToken{sum: sha256.Sum256([]byte(t.Token)), name: t.Name, views: t.Views})
	}
	if c.JWT.enabled() {
		opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithLeeway(c.JWT.Leeway), jwt.WithIssuedAt()}
		if len(c.JWT.HS256Secret) > 0 {
			opts = append(opts, jwt.WithValidMethods([]string{"HS256"}))
			a.key = c.JWT.HS256Secret
		} else {
			opts = append(opts, jwt.WithValidMethods([]string{"RS256"}))
			a.key = c.JWT.RS256PublicKey
		}
		if c.JWT.Issuer != "" {
			opts = append(opts, jwt.WithIssuer(c.JWT.Issuer))
		}
		if c.JWT.Audience != "" {
			opts = append(opts, jwt.WithAudience(c.JWT.Audience))
		}
		a.parser = jwt.NewParser(opts...)
	}
	return a
}

func unauthorized(format string, args ...any) *apiError {
	e := newError(http.StatusUnauthorized, CodeUnauthorized, format, args...)
	return e
}

// authenticate returns who sent r; nil principal and nil error when the API is open.
func (a *authorizer) authenticate(r *http.Request) (*principal, *apiError) {
	if a.open {
		return nil, nil
	}
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return nil, unauthorized("this API needs a bearer token (Authorization: Bearer <token>)").withHeader("WWW-Authenticate", realm)
	}
	scheme, tok, ok := strings.Cut(h[0], " ")
	if len(h) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || strings.ContainsAny(tok, " \t") {
		return nil, unauthorized("Authorization must be one \"Bearer <token>\"").
			withHeader("WWW-Authenticate", realm+`, error="invalid_request"`)
	}
	sum := sha256.Sum256([]byte(tok))
	var found *staticToken
	for i := range a.tokens { // every token is compared: the time taken says nothing
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].sum[:]) == 1 {
			found = &a.tokens[i]
		}
	}
	if found != nil {
		return &principal{name: found.name, views: found.views}, nil
	}
	if a.parser == nil {
		return nil, invalidToken("the token is not valid")
	}
	claims := jwt.MapClaims{}
	_, err := a.parser.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return a.key, nil })
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, invalidToken("the token has expired")
		case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return nil, invalidToken("the token is not valid yet")
		case errors.Is(err, jwt.ErrTokenInvalidIssuer):
			return nil, invalidToken("the token's issuer is not accepted")
		case errors.Is(err, jwt.ErrTokenInvalidAudience):
			return nil, invalidToken("the token is not meant for this API (audience)")
		case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
			return nil, invalidToken("the token lacks a required claim (exp)")
		}
		return nil, invalidToken("the token is not valid")
	}
	p := &principal{views: scopeOf(claims[a.claim])}
	if sub, ok := claims["sub"].(string); ok {
		p.name = sub
	}
	return p, nil
}

func invalidToken(msg string) *apiError {
	return unauthorized("%s", msg).withHeader("WWW-Authenticate", realm+`, error="invalid_token", error_description="`+msg+`"`)
}

// scopeOf reads a scope claim: a list of strings or one space-separated string.
func scopeOf(v any) []string {
	switch s := v.(type) {
	case string:
		return strings.Fields(s)
	case []any:
		var out []string
		for _, x := range s {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

// authorize checks that r may read view.
func (a *authorizer) authorize(p *principal, view string) *apiError {
	if a.open || p.may(view) {
		return nil
	}
	return newError(http.StatusForbidden, CodeForbidden, "the token may not read view %s", view).
		with("view", view).withHeader("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+view+`"`)
}
