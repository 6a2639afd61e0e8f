package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/projection"
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
		comps, err := projectionComponents(ctx, env, cfg)
		if err != nil {
			return nil, err
		}
		api, err := apiComponents(ctx, env, cfg)
		if err != nil {
			return nil, err
		}
		return append(comps, api...), nil
	}
	return spec, nil
}

func rebuildCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rebuild NAME",
		Short: "Rebuild a projection from the earliest event into a new collection, then switch readers to it",
		Long: "Rebuild a changelog projection from the earliest event into its next generation (<collection>-g<N>, consumed\n" +
			"as group <name>-g<N>) while the live one keeps serving; when it has caught up, switch every reader to it in one\n" +
			"write of jetbus_projections. Running projectors follow within a second; the rebuild hands the new generation\n" +
			"to them and removes the previous one after --grace. Progress (events done / total, rate, ETA) on stderr.",
		Args: cli.ExactArgs("NAME"),
	}
	conn := cli.ConnFlags(cmd, false)
	handover := cmd.Flags().Duration("handover", 30*time.Second, "after the switch, how long to keep writing the new generation until a running projector takes it over")
	grace := cmd.Flags().Duration("grace", 10*time.Second, "how long after the switch the previous generation is removed (readers cache the live collection for a second)")
	keep := cmd.Flags().Bool("keep-previous", false, "keep the previous generation's collections, consumers and checkpoints")
	timeout := cmd.Flags().Duration("timeout", 0, "give up after this long (0: never)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := conn.Load()
		if err != nil {
			return err
		}
		var names []string
		for _, p := range cfg.Projections {
			if p.Name == args[0] {
				return rebuild(cmd, cfg, p, projection.RebuildOptions{Handover: *handover, Grace: *grace, KeepPrevious: *keep}, *timeout)
			}
			names = append(names, p.Name)
		}
		declared := strings.Join(names, ", ")
		if declared == "" {
			declared = "none; pass --config"
		}
		return cli.Usagef("unknown projection %q (declared: %s)", args[0], declared)
	}
	return cmd
}
