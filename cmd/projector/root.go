package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/wiring"
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
			wiring.Projector),
		rebuildCommand(),
		cli.ConfigCommand(),
	)
	return root
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
				return rebuild(cmd, cfg, p.Name, projection.RebuildOptions{Handover: *handover, Grace: *grace, KeepPrevious: *keep}, *timeout)
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

// rebuild runs `projector rebuild NAME`: it connects, rebuilds the projection into its next
// generation with a progress bar on stderr (lines when not a terminal), and prints where the
// view lives now.
func rebuild(cmd *cobra.Command, cfg *config.Config, name string, ro projection.RebuildOptions, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// The log and the progress lines share stderr from several goroutines.
	errw := cli.SharedWriter(cmd.ErrOrStderr())
	log := cli.NewLogger(errw, cfg.Log.Level)
	t, err := wiring.Open(ctx, cfg, "projector rebuild", wiring.Needs{Schemas: true, DLQ: true, Mongo: true}, log)
	if err != nil {
		return err
	}
	defer t.Close()
	var bar *cli.Progress
	ro.Progress = func(pr projection.RebuildProgress) {
		if bar == nil {
			bar = cli.NewProgress(errw, "rebuild "+name, int(max(pr.Total, 1)))
		}
		bar.SetTotal(int(max(pr.Total, 1)))
		bar.Set(int(pr.Done), 0)
	}
	live, err := t.Rebuild(ctx, name, ro)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "rebuilt %s: generation %d, collection %s, group %s\n", name, live.Generation, live.Collection, live.Group)
	return nil
}
