// Package devenv runs jetbus's local environment for `make dev` and the binaries' --dev mode:
// an embedded nats-server with JetStream storing under <Dir>/jetstream, and the MongoDB test
// backend keeping its data under <Dir>/mongo, both on loopback, so the data survives a
// restart on the same directory. It is for a developer's machine, not for production: production
// points --nats-url and --mongo-uri at real clusters.
package devenv

import (
	"context"
	"errors"
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
	// Dir holds JetStream's store (Dir/jetstream) and the MongoDB backend's data (Dir/mongo);
	// default "./data".
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
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	dir, mongoDir := filepath.Join(root, "jetstream"), filepath.Join(root, "mongo")
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
	ms, err := minimongo.Start(minimongo.Options{Addr: cfg.MongoAddr, Dir: mongoDir, Logger: log})
	if err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		if _, listening := errors.AsType[*net.OpError](err); listening {
			return nil, fmt.Errorf("devenv: mongo backend (is %s free?): %w", cfg.MongoAddr, err)
		}
		return nil, fmt.Errorf("devenv: mongo backend: %w", err)
	}
	log.Info("dev environment up", "nats", ns.ClientURL(), "jetstream_dir", dir, "mongo", ms.URI(), "mongo_dir", mongoDir)
	return &Env{NATS: ns, Mongo: ms}, nil
}

// Close stops both servers; the MongoDB backend writes its data to Dir/mongo first.
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
