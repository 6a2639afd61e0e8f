package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/projection"
	"github.com/jetbus/jetbus/schema"
)

// projectionConfig maps a declared projection to package projection's Config: its database
// defaults to mongo.database, its partition buckets get the topic's replicas.
func projectionConfig(cfg *config.Config, p config.Projection) projection.Config {
	db := p.Database
	if db == "" {
		db = cfg.Mongo.Database
	}
	pc := projection.Config{
		Name: p.Name, Topic: p.Topic, Database: db, Collection: p.Collection,
		Mode: projection.Mode(p.Mode), Version: p.Version, Tombstones: projection.Tombstones(p.Tombstones),
		History: p.History, BatchSize: p.BatchSize, Linger: p.Linger, DeletedRetention: p.DeletedRetention,
	}
	for _, ix := range p.Indexes {
		pc.Indexes = append(pc.Indexes, projection.Index{Fields: ix.Fields, Unique: ix.Unique, Name: ix.Name})
	}
	for _, t := range cfg.Topics {
		if t.Name == p.Topic {
			pc.Replicas = t.Replicas
		}
	}
	return pc
}

// projectionDeps opens what every projection shares: the DLQ (with the configuration's
// settings) and the schema registry, whose upcaster makes projections see every event in its
// topic's latest shape.
func projectionDeps(ctx context.Context, env *process.Env, cfg *config.Config) (*dlq.Queue, []projection.Option, error) {
	q, err := dlq.Open(ctx, env.Bus.JetStream(), process.DLQConfig(cfg.DLQ), dlq.WithRegisterer(env.Metrics), dlq.WithLogger(env.Logger))
	if err != nil {
		return nil, nil, err
	}
	env.OnClose(func(context.Context) error { return q.Close() })
	reg, err := schema.Open(ctx, env.Bus.JetStream())
	if err != nil {
		return nil, nil, err
	}
	env.OnClose(func(context.Context) error { return reg.Close() })
	return q, []projection.Option{projection.WithLogger(env.Logger), projection.WithRegisterer(env.Metrics),
		projection.WithMiddlewares(reg.UpcastMiddleware())}, nil
}

// projectionComponents returns one component per declared projection: a changelog
// projection consuming as a replica of its group.
func projectionComponents(ctx context.Context, env *process.Env, cfg *config.Config) ([]process.Component, error) {
	if len(cfg.Projections) == 0 {
		return nil, nil
	}
	q, opts, err := projectionDeps(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	var comps []process.Component
	for _, p := range cfg.Projections {
		c, err := projection.NewChangelog(env.Bus, env.Mongo, q, projectionConfig(cfg, p), opts...)
		if err != nil {
			return nil, fmt.Errorf("projection %s: %w", p.Name, err)
		}
		comps = append(comps, c)
	}
	return comps, nil
}

// rebuild runs `projector rebuild NAME`: it connects, rebuilds the projection into its next
// generation with a progress bar on stderr (lines when not a terminal), and prints where the
// view lives now.
func rebuild(cmd *cobra.Command, cfg *config.Config, p config.Projection, ro projection.RebuildOptions, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// The log and the progress lines share stderr from several goroutines.
	errw := cmd.ErrOrStderr()
	if _, ok := errw.(*os.File); !ok {
		errw = &lockedWriter{w: errw}
	}
	log := cli.NewLogger(errw, cfg.Log.Level)
	nc, err := process.ConnectNATS(cfg.NATS, "jetbus projector rebuild", false)
	if err != nil {
		return err
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc, jetstream.WithLogger(log))
	if err != nil {
		return err
	}
	defer bus.Close()
	client, err := process.ConnectMongo(cfg.Mongo, "jetbus projector rebuild")
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
	env := &process.Env{Config: cfg, Logger: log, Bus: bus, Conn: nc, Mongo: client}
	q, opts, err := projectionDeps(ctx, env, cfg)
	if err != nil {
		return err
	}
	defer q.Close()
	var bar *cli.Progress
	ro.Progress = func(pr projection.RebuildProgress) {
		if bar == nil {
			bar = cli.NewProgress(errw, "rebuild "+p.Name, int(max(pr.Total, 1)))
		}
		bar.SetTotal(int(max(pr.Total, 1)))
		bar.Set(int(pr.Done), 0)
	}
	live, err := projection.Rebuild(ctx, bus, client, q, projectionConfig(cfg, p), ro, opts...)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "rebuilt %s: generation %d, collection %s, group %s\n", p.Name, live.Generation, live.Collection, live.Group)
	return nil
}

// lockedWriter serializes writes to a writer that is not safe for concurrent use.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
