// Package devenv runs jetbus's local environment for `make dev` and the binaries' --dev mode:
// an embedded nats-server with JetStream storing under a directory, and the MongoDB test
// backend, both on loopback. It is for a developer's machine, not for production: production
// points --nats-url and --mongo-uri at real clusters.
package devenv

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// Config says where the environment listens and stores.
type Config struct {
	// Dir holds JetStream's store (default "./data").
	Dir string
	// NATSPort is the NATS client port (default 4222; -1 picks a free one).
	NATSPort int
	// MongoAddr is the MongoDB backend's address (default "127.0.0.1:27017"; port 0 picks a
	// free one).
	MongoAddr string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// Env is a running environment.
type Env struct {
	NATS  *server.Server
	Mongo *minimongo.Server
}

// NATSURL is the URL clients connect to.
func (e *Env) NATSURL() string { return e.NATS.ClientURL() }

// MongoURI is the connection string of the MongoDB backend.
func (e *Env) MongoURI() string { return e.Mongo.URI() }

// Start starts the environment. Stop it with Close.
func Start(cfg Config) (*Env, error) {
	if cfg.Dir == "" {
		cfg.Dir = "data"
	}
	if cfg.NATSPort == 0 {
		cfg.NATSPort = 4222
	}
	if cfg.MongoAddr == "" {
		cfg.MongoAddr = "127.0.0.1:27017"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(filepath.Join(cfg.Dir, "jetstream"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("devenv: %w", err)
	}
	opts := embeddedtest.ServerOptions(dir)
	opts.Port = cfg.NATSPort
	opts.ServerName = "jetbus-dev"
	ns, err := embeddedtest.StartServer(opts)
	if err != nil {
		return nil, fmt.Errorf("devenv: nats (is port %d free?): %w", cfg.NATSPort, err)
	}
	if _, _, err := net.SplitHostPort(cfg.MongoAddr); err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("devenv: mongo address %q: %w", cfg.MongoAddr, err)
	}
	ms, err := minimongo.Start(minimongo.Options{Addr: cfg.MongoAddr, Logger: log})
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("devenv: mongo backend (is %s free?): %w", cfg.MongoAddr, err)
	}
	log.Info("dev environment up", "nats", ns.ClientURL(), "jetstream_dir", dir, "mongo", ms.URI())
	return &Env{NATS: ns, Mongo: ms}, nil
}

// Close stops both servers.
func (e *Env) Close() error {
	err := e.Mongo.Close()
	e.NATS.Shutdown()
	e.NATS.WaitForShutdown()
	return err
}

// Run starts the environment and keeps it up until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	env, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return env.Close()
}
