package main

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// changefeedComponents returns one component per declared changefeed and outbox drainer.
// They publish through a Bus of their own on env.Conn with the schema registry's publish
// middleware, so every change is validated against its topic's schema; what can never be
// published goes to q.
func changefeedComponents(ctx context.Context, env *process.Env, q *dlq.Queue) (comps []process.Component, err error) {
	cfg := env.Config
	if len(cfg.Changefeeds) == 0 && len(cfg.Outbox) == 0 {
		return nil, nil
	}
	reg, err := schema.Open(ctx, env.Bus.JetStream(), schema.WithLogger(env.Logger))
	if err != nil {
		return nil, err
	}
	// The runners share the Bus: its bound on outstanding async publishes must hold all their
	// windows, or a full Bus would fail publishes that each runner's window allows.
	pending := len(cfg.Outbox) * changefeed.DefaultMaxInFlight
	for _, fc := range cfg.Changefeeds {
		pending += max(fc.MaxInFlight, 1)
	}
	bus, err := jetstream.Open(ctx, env.Conn, jetstream.WithPublishMiddleware(reg.PublishMiddleware()),
		jetstream.WithLogger(env.Logger), jetstream.WithRegisterer(env.Metrics), jetstream.WithAsyncMaxPending(max(pending, 4000)))
	if err != nil {
		_ = reg.Close()
		return nil, err
	}
	defer func() {
		if err != nil { // Setup is tried again: leave nothing open behind
			_ = bus.Close()
			_ = reg.Close()
		}
	}()
	opts := []changefeed.Option{changefeed.WithLogger(env.Logger), changefeed.WithRegisterer(env.Metrics), changefeed.WithDeadLetters(q)}
	for _, fc := range cfg.Changefeeds {
		f, err := changefeed.New(ctx, bus, env.Mongo, changefeedConfig(cfg, fc), opts...)
		if err != nil {
			return nil, fmt.Errorf("changefeed %s: %w", fc.Name, err)
		}
		comps = append(comps, f)
	}
	for _, oc := range cfg.Outbox {
		db := oc.Database
		if db == "" {
			db = cfg.Mongo.Database
		}
		d, err := changefeed.NewDrainer(ctx, bus, env.Mongo, changefeed.OutboxConfig{
			Name: oc.Name, Database: db, Collection: oc.Collection, After: oc.After, Retention: oc.Retention,
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("outbox %s: %w", oc.Name, err)
		}
		comps = append(comps, d)
	}
	env.OnClose(func(context.Context) error { return bus.Close() })
	env.OnClose(func(context.Context) error { return reg.Close() })
	return comps, nil
}

// changefeedConfig maps a declared changefeed to the package's Config.
func changefeedConfig(cfg *config.Config, f config.Changefeed) changefeed.Config {
	db := f.Database
	if db == "" && !f.Deployment {
		db = cfg.Mongo.Database
	}
	pipeline := make(mongo.Pipeline, 0, len(f.Pipeline))
	for _, st := range f.Pipeline {
		// One key per stage (config check); keys sorted only to be deterministic.
		keys := make([]string, 0, len(st))
		for k := range st {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		d := bson.D{}
		for _, k := range keys {
			d = append(d, bson.E{Key: k, Value: st[k]})
		}
		pipeline = append(pipeline, d)
	}
	return changefeed.Config{
		Name: f.Name, Database: db, Collection: f.Collection, Pipeline: pipeline, Topic: f.Topic,
		Format: changefeed.Format(f.Format), FullDocument: changefeed.FullDocument(f.FullDocument),
		Start: changefeed.Start(f.Start), StartAt: f.StartAt, OnHistoryLost: changefeed.HistoryPolicy(f.OnHistoryLost),
		Heartbeat: f.Heartbeat, MaxInFlight: f.MaxInFlight,
	}
}
