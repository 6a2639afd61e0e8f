package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// ingressComponents wires ingress when the configuration opens topics to it: a Bus on the
// process's connection with the schema registry's publish middleware, and a connection of
// ingress's own for the service (see ingress.New). Everything it opens closes with the
// process, or at once when wiring fails (setup is retried).
func ingressComponents(ctx context.Context, env *process.Env, cfg *config.Config, q *dlq.Queue) (_ []process.Component, err error) {
	ic := cfg.Ingress
	if len(ic.Allow) == 0 {
		return nil, nil
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	reg, err := schema.Open(ctx, env.Bus.JetStream())
	if err != nil {
		return nil, fmt.Errorf("ingress: schema registry: %w", err)
	}
	closers = append(closers, reg.Close)
	bus, err := jetstream.Open(ctx, env.Conn,
		jetstream.WithPublishMiddleware(reg.PublishMiddleware()),
		jetstream.WithAsyncMaxPending(max(ic.MaxInFlight, 4000)),
		jetstream.WithRegisterer(env.Metrics), jetstream.WithLogger(env.Logger))
	if err != nil {
		return nil, err
	}
	closers = append(closers, bus.Close)
	conn, err := process.ConnectNATS(cfg.NATS, "jetbus bridge ingress", true)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() error { conn.Close(); return nil })
	conn.SetErrorHandler(natsErrors(env.Logger))
	g, err := ingress.New(conn, bus, q, ingress.Config{
		Allow:          ic.Allow,
		MaxMessageSize: int(ic.MaxMessageSize),
		MaxInFlight:    ic.MaxInFlight,
		PendingMsgs:    ic.MaxPending,
		PendingBytes:   int(min(ic.MaxPendingSize, 1<<31-1)),
		AckTimeout:     ic.AckTimeout,
		DrainTimeout:   max(cfg.Shutdown.Timeout/2, time.Millisecond),
		ReplyPrefixes:  ic.ReplyPrefixes,
	}, ingress.WithLogger(env.Logger), ingress.WithRegisterer(env.Metrics))
	if err != nil {
		return nil, err
	}
	env.OnClose(func(context.Context) error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	})
	return []process.Component{g}, nil
}

// natsErrors logs a connection's asynchronous errors instead of nats.go's default of
// printing them on standard error, which would break the JSON log lines.
func natsErrors(log *slog.Logger) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		log.Warn("NATS error", "subject", subject, "error", err)
	}
}
