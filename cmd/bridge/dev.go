package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jetbus/jetbus/internal/devenv"
)

// runDev runs the local environment (embedded NATS with JetStream, the MongoDB test backend)
// until interrupted.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bridge dev", stderr)
	dir := fs.String("dir", "data", "directory for JetStream's store")
	port := fs.Int("nats-port", 4222, "NATS client port (-1: any free port)")
	mongo := fs.String("mongo-addr", "127.0.0.1:27017", "address of the MongoDB test backend (port 0: any free port)")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	env, err := devenv.Start(devenv.Config{Dir: *dir, NATSPort: *port, MongoAddr: *mongo, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "NATS:    %s (JetStream in %s)\nMongoDB: %s\nCtrl-C to stop.\n", env.NATSURL(), *dir, env.MongoURI())
	<-ctx.Done()
	if err := env.Close(); err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	return 0
}
