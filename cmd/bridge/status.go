package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/wiring"
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
		t, err := wiring.Open(ctx, cfg, "bridge status", wiring.Needs{}, nil)
		if err != nil {
			return err
		}
		defer t.Close()
		st, err := t.Status(ctx)
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
