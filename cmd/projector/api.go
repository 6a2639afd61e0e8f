package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/schema"
	"github.com/jetbus/jetbus/snapshotapi"
)

// apiComponents wires the snapshot API when views or http.topics are declared: the cursor
// key shared through NATS KV, the schema registry for /openapi.json, the Bus for keys of
// topics. It is served on the operations address (http.addr) beside /healthz and the other
// operations endpoints, or on a listener of its own when http.api_addr is set.
func apiComponents(ctx context.Context, env *process.Env, cfg *config.Config) ([]process.Component, error) {
	if len(cfg.Views) == 0 && len(cfg.HTTP.Topics) == 0 {
		return nil, nil
	}
	key, err := snapshotapi.LoadCursorKey(ctx, env.Bus.JetStream(), kvReplicas(cfg))
	if err != nil {
		return nil, err
	}
	ac, err := apiConfig(cfg, key)
	if err != nil {
		return nil, err
	}
	reg, err := schema.Open(ctx, env.Bus.JetStream())
	if err != nil {
		return nil, fmt.Errorf("snapshot API: schema registry: %w", err)
	}
	srv, err := snapshotapi.New(snapshotapi.Deps{Mongo: env.Mongo, Schemas: reg, Keys: env.Bus}, ac,
		snapshotapi.WithLogger(env.Logger.With("component", "snapshot-api")), snapshotapi.WithRegisterer(env.Metrics))
	if err != nil {
		_ = reg.Close()
		return nil, err
	}
	env.OnClose(func(context.Context) error { return reg.Close() })
	if cfg.HTTP.APIAddr == "" {
		env.Handle(srv)
	}
	return []process.Component{&apiComponent{srv: srv, env: env, addr: cfg.HTTP.APIAddr, timeout: cfg.HTTP.RequestTimeout}}, nil
}

// kvReplicas is the replication of the cursor key's bucket: that of the most replicated topic.
func kvReplicas(cfg *config.Config) int {
	n := 1
	for _, t := range cfg.Topics {
		n = max(n, t.Replicas)
	}
	return n
}

// apiConfig maps the YAML declarations to the API's Config.
func apiConfig(cfg *config.Config, key []byte) (snapshotapi.Config, error) {
	ac := snapshotapi.Config{Database: cfg.Mongo.Database, CursorKey: key, Topics: cfg.HTTP.Topics,
		CORSOrigins: cfg.HTTP.CORSOrigins, RequestTimeout: cfg.HTTP.RequestTimeout}
	partitions := map[string]int{}
	for _, t := range cfg.Topics {
		partitions[t.Name] = t.Partitions
	}
	for _, v := range cfg.Views {
		var p *config.Projection
		for i := range cfg.Projections {
			if cfg.Projections[i].Name == v.Projection {
				p = &cfg.Projections[i]
			}
		}
		if p == nil {
			return ac, fmt.Errorf("views: %s: projection %q is not declared", v.Name, v.Projection)
		}
		filters := map[string]snapshotapi.FieldType{}
		for f, t := range v.Filters {
			filters[f] = snapshotapi.FieldType(t)
		}
		ac.Views = append(ac.Views, snapshotapi.View{Name: v.Name, Projection: p.Name, Topic: p.Topic,
			Partitions: partitions[p.Topic], Database: p.Database, Collection: p.Collection, Filters: filters,
			Sort: v.Sort, Fields: v.Fields, MaxLimit: v.MaxLimit, CacheControl: v.CacheControl, History: p.History})
	}
	for _, t := range cfg.Auth.Tokens {
		ac.Tokens = append(ac.Tokens, snapshotapi.Token{Name: t.Name, Token: t.Token, Views: t.Views})
	}
	j := cfg.Auth.JWT
	ac.JWT = snapshotapi.JWT{HS256Secret: []byte(j.HS256Secret), Issuer: j.Issuer, Audience: j.Audience, ScopeClaim: j.ScopeClaim}
	if j.RS256PublicKey != "" {
		pem, err := os.ReadFile(j.RS256PublicKey)
		if err != nil {
			return ac, fmt.Errorf("auth.jwt.rs256_public_key: %w", err)
		}
		if ac.JWT.RS256PublicKey, err = jwt.ParseRSAPublicKeyFromPEM(pem); err != nil {
			return ac, fmt.Errorf("auth.jwt.rs256_public_key: %s: %w", j.RS256PublicKey, err)
		}
	}
	return ac, ac.Validate()
}

// apiComponent serves the snapshot API on its own listener and keeps its cache live.
type apiComponent struct {
	srv     *snapshotapi.Server
	env     *process.Env
	addr    string
	timeout time.Duration
}

func (c *apiComponent) Name() string { return "snapshot-api" }

// Ready reports the API's readiness (sort fields backed by indexes).
func (c *apiComponent) Ready(ctx context.Context) error { return c.srv.Ready(ctx) }

// Run keeps the API's cache live until ctx ends. With http.api_addr it also listens there
// and serves until ctx ends, then lets requests in flight finish (at most the request
// timeout); otherwise the operations server serves it.
func (c *apiComponent) Run(ctx context.Context) error {
	if c.addr == "" {
		return c.srv.Run(ctx)
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("http.api_addr: %w", err)
	}
	hs := &http.Server{Handler: c.srv, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: c.timeout + 5*time.Second,
		MaxHeaderBytes: snapshotapi.DefaultMaxHeaderBytes * 2}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	cached := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { cached <- c.srv.Run(cctx) }()
	c.env.Logger.Info("snapshot API listening", "addr", ln.Addr().String())
	select {
	case <-ctx.Done():
	case err = <-served:
		cancel()
		<-cached
		return fmt.Errorf("snapshot API: %w", err)
	}
	sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer stop()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		c.env.Logger.Warn("snapshot API", "error", err)
	}
	cancel()
	return <-cached
}
