package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/jetstream"
)

func statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show topics, consumer groups (members, owners, leases, lag per partition) and dead letters",
		Long: "Show what /v1/ops/status shows, read from NATS: topics with partitions and message counts; consumer groups\n" +
			"with members, the owner, lease and lag of each partition; dead letters by topic and reason.",
		Args: cli.NoArgs,
	}
	conn := cli.ConnFlags(cmd, false)
	asJSON := cmd.Flags().Bool("json", false, "print JSON (as /v1/ops/status) instead of tables")
	timeout := cmd.Flags().Duration("timeout", 30*time.Second, "give up after this long")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := conn.Load()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		bus, closeBus, err := openBus(ctx, cfg, "status")
		if err != nil {
			return err
		}
		defer closeBus()
		st, err := ops.Collect(ctx, statusSource(cfg, bus))
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		return ops.WriteTable(cmd.OutOrStdout(), st)
	}
	return cmd
}

// statusSource is what a status reads: the declared topics, and the projections' groups.
func statusSource(cfg *config.Config, bus *jetstream.Bus) ops.Source {
	src := ops.Source{JS: bus.JetStream(), Bus: bus}
	for _, t := range cfg.Topics {
		src.Topics = append(src.Topics, t.Name)
	}
	for _, p := range cfg.Projections {
		src.Groups = append(src.Groups, ops.GroupRef{Topic: p.Topic, Group: p.Name})
	}
	return src
}

// openBus connects a tool to NATS (failing at once when no server answers) and opens a Bus.
func openBus(ctx context.Context, cfg *config.Config, what string, opts ...jetstream.Option) (*jetstream.Bus, func(), error) {
	nc, err := process.ConnectNATS(cfg.NATS, "jetbus bridge "+what, false)
	if err != nil {
		return nil, nil, err
	}
	bus, err := jetstream.Open(ctx, nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return bus, func() { _ = bus.Close(); nc.Close() }, nil
}
