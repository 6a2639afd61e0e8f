package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/process"
)

func runCommand() *cobra.Command {
	return cli.RunCommand("Run the bridge process until SIGTERM or SIGINT",
		"Run the bridge: register the schemas directory, ensure the configured topics, and run the DLQ sweeper;\n"+
			"serve /healthz, /readyz, /metrics and /v1/ops/status on http.addr. The first SIGTERM or SIGINT drains and\n"+
			"exits 0 within shutdown.timeout; a second exits at once.",
		bridgeSpec)
}

// bridgeSpec wires the bridge's setup and components.
func bridgeSpec(cfg *config.Config) (process.Spec, error) {
	return process.Spec{
		Name:       "bridge",
		NeedsMongo: len(cfg.Changefeeds) > 0 || len(cfg.Outbox) > 0,
		Setup: func(ctx context.Context, env *process.Env) ([]process.Component, error) {
			log := env.Logger
			if cfg.Schemas != "" {
				if err := process.PushSchemas(ctx, env.Bus.JetStream(), cfg.Schemas, log); err != nil {
					return nil, err
				}
			}
			if err := process.EnsureTopics(ctx, env.Bus, cfg.Topics, log); err != nil {
				return nil, err
			}
			q, err := dlq.Open(ctx, env.Bus.JetStream(), process.DLQConfig(cfg.DLQ), dlq.WithRegisterer(env.Metrics), dlq.WithLogger(log))
			if err != nil {
				return nil, err
			}
			env.OnClose(func(context.Context) error { return q.Close() })
			feeds, err := changefeedComponents(ctx, env, q)
			if err != nil {
				return nil, err
			}
			ing, err := ingressComponents(ctx, env, cfg, q)
			if err != nil {
				return nil, err
			}
			comps := append([]process.Component{process.Sweeper(q, cfg.DLQ.SweepInterval)}, feeds...)
			return append(comps, ing...), nil
		},
	}, nil
}
