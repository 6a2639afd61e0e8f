package main

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/process"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:     "projector",
		Short:   "Materialize topics into MongoDB views and serve them over HTTP",
		Version: cli.Version(),
	}
	root.AddCommand(
		cli.RunCommand("Run the projector process until SIGTERM or SIGINT",
			"Run the projector: ensure the configured topics, run the projections as partitioned replicas and serve\n"+
				"the snapshot API, with /healthz, /readyz, /metrics and /v1/ops/status on http.addr. The first SIGTERM or\n"+
				"SIGINT drains, releases the partition leases and exits 0 within shutdown.timeout; a second exits at once.",
			projectorSpec),
		rebuildCommand(),
		cli.ConfigCommand(),
	)
	return root
}

// projectorSpec wires the projector's setup and components.
func projectorSpec(cfg *config.Config) (process.Spec, error) {
	spec := process.Spec{Name: "projector", NeedsMongo: len(cfg.Projections) > 0}
	for _, p := range cfg.Projections {
		spec.Groups = append(spec.Groups, ops.GroupRef{Topic: p.Topic, Group: p.Name})
	}
	spec.Setup = func(ctx context.Context, env *process.Env) ([]process.Component, error) {
		if err := process.EnsureTopics(ctx, env.Bus, cfg.Topics, env.Logger); err != nil {
			return nil, err
		}
		if len(cfg.Projections) > 0 {
			env.Logger.Warn("projections are configured but not built into this projector yet: they do not run",
				"projections", len(cfg.Projections))
		}
		return apiComponents(ctx, env, cfg)
	}
	return spec, nil
}

// errNoProjections says rebuild waits for the projection package.
var errNoProjections = errors.New("projector rebuild is not available yet: this build has no projections to rebuild")

func rebuildCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rebuild NAME",
		Short: "Rebuild a projection from the earliest event into a new collection, then switch readers to it",
		Args:  cli.ExactArgs("NAME"),
	}
	conn := cli.ConnFlags(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := conn.Load()
		if err != nil {
			return err
		}
		var names []string
		for _, p := range cfg.Projections {
			names = append(names, p.Name)
		}
		if !slices.Contains(names, args[0]) {
			declared := strings.Join(names, ", ")
			if declared == "" {
				declared = "none; pass --config"
			}
			return cli.Usagef("unknown projection %q (declared: %s)", args[0], declared)
		}
		return errNoProjections
	}
	return cmd
}
