package config

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
)

// crossCheck finds what no single key can show: duplicate names, references to topics,
// projections and views that are not declared, and settings that only make sense together.
func (c *Config) crossCheck(is *issues) {
	idx := func(section string, i int, key string) string {
		return section + "[" + strconv.Itoa(i) + "]." + key
	}
	unique := func(section, key string, n int, name func(int) string) map[string]int {
		seen := map[string]int{}
		for i := range n {
			v := name(i)
			if v == "" {
				continue
			}
			if j, dup := seen[v]; dup {
				is.add(idx(section, i, key), "%q is declared twice (also %s[%d])", v, section, j)
				continue
			}
			seen[v] = i
		}
		return seen
	}

	topics := unique("topics", "name", len(c.Topics), func(i int) string { return c.Topics[i].Name })
	unknownTopic := func(path, t string) {
		if _, ok := topics[t]; !ok && t != "" {
			is.add(path, "topic %q is not declared in topics%s", t, near(t, keys(topics)))
		}
	}
	for i, t := range c.Topics {
		if !t.Keyed && t.KeepPerKey > 0 {
			is.add(idx("topics", i, "keep_per_key"), "only a keyed topic keeps events per key (set keyed: true)")
		}
	}

	// Auth on NATS: one way at a time.
	var ways []string
	for _, w := range []struct{ name, v string }{{"creds", c.NATS.Creds}, {"nkey", c.NATS.NKey}, {"user", c.NATS.User}, {"token", c.NATS.Token}} {
		if w.v != "" {
			ways = append(ways, w.name)
		}
	}
	if len(ways) > 1 {
		is.add("nats."+ways[1], "set one of creds, nkey, user/password and token; found %s", strings.Join(ways, " and "))
	}
	if (c.NATS.User == "") != (c.NATS.Password == "") {
		if c.NATS.User == "" {
			is.add("nats.password", "a password needs a user")
		} else {
			is.add("nats.user", "a user needs a password")
		}
	}
	if (c.NATS.TLS.Cert == "") != (c.NATS.TLS.Key == "") {
		if c.NATS.TLS.Cert == "" {
			is.add("nats.tls.key", "a client key needs a cert")
		} else {
			is.add("nats.tls.cert", "a client cert needs a key")
		}
	}
	if c.UsesMongo() && c.Mongo.URI == "" {
		// Reported where MongoDB is first needed: the mongo section may not exist.
		for _, s := range []struct {
			key string
			n   int
		}{{"projections", len(c.Projections)}, {"changefeeds", len(c.Changefeeds)}, {"outbox", len(c.Outbox)}} {
			if s.n > 0 {
				is.add(s.key, "need mongo.uri (MongoDB), which is not set")
				break
			}
		}
	}

	for i, t := range c.Ingress.Allow {
		unknownTopic("ingress.allow["+strconv.Itoa(i)+"]", t)
	}

	unique("changefeeds", "name", len(c.Changefeeds), func(i int) string { return c.Changefeeds[i].Name })
	for i, f := range c.Changefeeds {
		switch {
		case !strings.Contains(f.Topic, "{"):
			unknownTopic(idx("changefeeds", i, "topic"), f.Topic)
		case strings.Contains(f.Topic, "{collection}") && f.Collection != "":
			is.add(idx("changefeeds", i, "topic"), "{collection} needs a feed of a whole database (collection empty)")
		case strings.Contains(f.Topic, "{database}") && !f.Deployment:
			is.add(idx("changefeeds", i, "topic"), "{database} needs a feed of the deployment (deployment: true)")
		}
		if f.Deployment && (f.Database != "" || f.Collection != "") {
			is.add(idx("changefeeds", i, "deployment"), "a feed of the deployment names no database or collection")
		}
		switch {
		case f.Start == "timestamp" && f.StartAt.IsZero():
			is.add(idx("changefeeds", i, "start_at"), "required with start: timestamp")
		case f.Start != "timestamp" && !f.StartAt.IsZero():
			is.add(idx("changefeeds", i, "start_at"), "only used with start: timestamp")
		}
		for j, st := range f.Pipeline {
			if len(st) != 1 {
				is.add(fmt.Sprintf("changefeeds[%d].pipeline[%d]", i, j), "a stage has exactly one key (its operator), found %d", len(st))
			}
		}
	}

	unique("outbox", "name", len(c.Outbox), func(i int) string { return c.Outbox[i].Name })
	unique("outbox", "collection", len(c.Outbox), func(i int) string {
		return c.DatabaseOf(c.Outbox[i].Database) + "." + c.Outbox[i].Collection
	})

	projections := unique("projections", "name", len(c.Projections), func(i int) string { return c.Projections[i].Name })
	unique("projections", "collection", len(c.Projections), func(i int) string {
		return c.DatabaseOf(c.Projections[i].Database) + "." + c.Projections[i].Collection
	})
	for i, o := range c.Outbox {
		for j, t := range o.Topics {
			unknownTopic(fmt.Sprintf("outbox[%d].topics[%d]", i, j), t)
		}
	}
	for i, p := range c.Projections {
		unknownTopic(idx("projections", i, "topic"), p.Topic)
		unique(fmt.Sprintf("projections[%d].indexes", i), "name", len(p.Indexes), func(j int) string { return p.Indexes[j].Name })
	}

	views := unique("views", "name", len(c.Views), func(i int) string { return c.Views[i].Name })
	for i, v := range c.Views {
		pi, ok := projections[v.Projection]
		if !ok {
			if v.Projection != "" {
				is.add(idx("views", i, "projection"), "projection %q is not declared in projections%s", v.Projection, near(v.Projection, keys(projections)))
			}
			continue
		}
		p := c.Projections[pi]
		leads := func(f string) bool {
			return f == "_id" || slices.ContainsFunc(p.Indexes, func(x Index) bool {
				return len(x.Fields) > 0 && strings.TrimPrefix(x.Fields[0], "-") == f
			})
		}
		for j, s := range v.Sort {
			if !leads(s) {
				is.add(fmt.Sprintf("views[%d].sort[%d]", i, j), "no index of projection %q leads with %q: declare one under its indexes", p.Name, s)
			}
		}
		if !v.Scan {
			for _, f := range slices.Sorted(maps.Keys(v.Filters)) {
				if !leads(f) {
					is.add(fmt.Sprintf("views[%d].filters.%s", i, f), "no index of projection %q leads with %q, so each such request would scan the collection: declare an index under its indexes, or set scan: true to allow it", p.Name, f)
				}
			}
		}
	}

	apiTopics := map[string]int{}
	for i, name := range c.HTTP.Topics {
		if j, dup := apiTopics[name]; dup {
			is.add("http.topics["+strconv.Itoa(i)+"]", "%q is declared twice (also http.topics[%d])", name, j)
			continue
		}
		apiTopics[name] = i
		if ti, ok := topics[name]; !ok {
			unknownTopic("http.topics["+strconv.Itoa(i)+"]", name)
		} else if !c.Topics[ti].Keyed {
			is.add("http.topics["+strconv.Itoa(i)+"]", "topic %q is not keyed: the API reads keys only of keyed topics (set keyed: true)", name)
		}
	}
	for i, t := range c.Auth.Tokens {
		for j, v := range t.Views {
			if name, ok := strings.CutPrefix(v, "topic:"); ok {
				if _, ok := apiTopics[name]; !ok {
					is.add(fmt.Sprintf("auth.tokens[%d].views[%d]", i, j), "topic %q is not declared in http.topics%s", name, near(name, keys(apiTopics)))
				}
				continue
			}
			if _, ok := views[v]; !ok && v != "*" && v != ScopeOps {
				is.add(fmt.Sprintf("auth.tokens[%d].views[%d]", i, j), "view %q is not declared in views%s", v, near(v, keys(views)))
			}
		}
	}
	unique("auth.tokens", "token", len(c.Auth.Tokens), func(i int) string { return c.Auth.Tokens[i].Token })
	for i, t := range c.Auth.Tokens {
		if path := fmt.Sprintf("auth.tokens[%d].token", i); t.Token != "" && len(t.Token) < MinTokenLength && !is.has(path) && !strings.Contains(t.Token, "${") {
			is.add(path, "a token has at least %d characters (this one %d): make one with openssl rand -hex 32", MinTokenLength, len(t.Token))
		}
	}
	if s := c.Auth.JWT.HS256Secret; s != "" && len(s) < MinHS256SecretLength && !is.has("auth.jwt.hs256_secret") {
		is.add("auth.jwt.hs256_secret", "an HS256 secret has at least %d bytes, the hash's size (RFC 7518 3.2); this one %d", MinHS256SecretLength, len(s))
	}
	for i, v := range c.Views {
		if v.Name == ScopeOps {
			is.add(idx("views", i, "name"), "%q is the operations endpoints' scope: name the view otherwise", ScopeOps)
		}
	}
	c.checkOpen(is)
	if c.Auth.JWT.HS256Secret != "" && c.Auth.JWT.RS256PublicKey != "" {
		is.add("auth.jwt.rs256_public_key", "set one of hs256_secret and rs256_public_key")
	}
	if c.Auth.JWT.HS256Secret == "" && c.Auth.JWT.RS256PublicKey == "" && (c.Auth.JWT.Issuer != "" || c.Auth.JWT.Audience != "") {
		is.add("auth.jwt", "issuer and audience need hs256_secret or rs256_public_key")
	}
}

// ScopeOps is the scope a token needs for /v1/ops/status and /metrics once auth is configured
// (snapshotapi.ScopeOps).
const ScopeOps = "ops"

// Minimum lengths of secrets: a static token, and an HS256 secret (RFC 7518 3.2: at least the
// hash's size).
const (
	MinTokenLength       = 16
	MinHS256SecretLength = 32
)

// checkOpen refuses an HTTP server listening beyond loopback without access control, unless
// auth.open says so on purpose.
func (c *Config) checkOpen(is *issues) {
	if c.Auth.Open || len(c.Auth.Tokens) > 0 || c.Auth.JWT.HS256Secret != "" || c.Auth.JWT.RS256PublicKey != "" {
		return
	}
	for _, a := range []struct{ key, addr string }{{"http.addr", c.HTTP.Addr}, {"http.api_addr", c.HTTP.APIAddr}} {
		if a.addr != "" && !Loopback(a.addr) && !is.has(a.key) {
			is.add(a.key, "%s listens beyond loopback without auth: declare auth.tokens or auth.jwt, listen on 127.0.0.1, or set auth.open: true to serve views, /v1/ops/status and /metrics to anyone who reaches it", a.addr)
		}
	}
}

// Loopback reports whether the listen address addr (host:port) takes connections from this
// machine only: a loopback IP, or localhost. An empty host, 0.0.0.0 and :: listen everywhere.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DatabaseOf is the rule "a component's database defaults to mongo.database", for the
// checks here and the wiring of the processes.
func (c *Config) DatabaseOf(db string) string {
	if db == "" {
		return c.Mongo.Database
	}
	return db
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// near suggests a declared name close to a wrong one, or lists the declared names.
func near(s string, declared []string) string {
	best, bestD := "", 3
	for _, d := range declared {
		if dd := distance(s, d); dd < bestD {
			best, bestD = d, dd
		}
	}
	switch {
	case best != "":
		return fmt.Sprintf(" (did you mean %q?)", best)
	case len(declared) == 0:
		return " (none declared)"
	case len(declared) <= 5:
		return " (declared: " + strings.Join(declared, ", ") + ")"
	}
	return ""
}
