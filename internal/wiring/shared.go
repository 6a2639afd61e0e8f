package wiring

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

// shared is what the components of one process share, each opened once: the schema
// registry and the DLQ queue (and, through env, the NATS connection, the plain Bus and the
// MongoDB client that process.Run opens).
type shared struct {
	env *process.Env
	reg *schema.Registry
	q   *dlq.Queue
	res *resources
}

// dlqUse is how a process opens the DLQ.
type dlqUse int

const (
	noDLQ     dlqUse = iota
	ownDLQ           // apply the configuration's settings: the bridge owns the DLQ
	attachDLQ        // use it as it is, creating only what is missing: the projector
)

// openShared opens the registry and the DLQ queue as use says. The bridge applies the dlq
// section's settings; a projector attaches (dlq.Config.Attach), so that its NATS user needs no
// right to update the DLQ's streams (deploy/nats/auth.conf). Everything opened is added to res.
func openShared(ctx context.Context, env *process.Env, res *resources, use dlqUse) (*shared, error) {
	sh := &shared{env: env, res: res}
	reg, err := schema.Open(ctx, env.Bus.JetStream(), schema.WithLogger(env.Logger))
	if err != nil {
		return nil, err
	}
	res.add(reg.Close)
	sh.reg = reg
	if use != noDLQ {
		q, err := dlq.Open(ctx, env.Bus.JetStream(), dlqConfig(env.Config.DLQ, use == attachDLQ), dlq.WithRegisterer(env.Metrics), dlq.WithLogger(env.Logger))
		if err != nil {
			return nil, err
		}
		res.add(q.Close)
		sh.q = q
	}
	return sh, nil
}

// publishingBus opens a Bus on the process's connection that validates every publish against
// its topic's schema (the registry's publish middleware), with room for pending async
// publishes. Each publishing component kind gets its own (see Bridge for why).
func (sh *shared) publishingBus(ctx context.Context, pending int) (*jetstream.Bus, error) {
	bus, err := jetstream.Open(ctx, sh.env.Conn, append(sh.env.BusOptions(), jetstream.WithPublishMiddleware(sh.reg.PublishMiddleware()),
		jetstream.WithAsyncMaxPending(max(pending, 4000)),
		jetstream.WithRegisterer(sh.env.Metrics), jetstream.WithLogger(sh.env.Logger))...)
	if err != nil {
		return nil, err
	}
	sh.res.add(bus.Close)
	return bus, nil
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
