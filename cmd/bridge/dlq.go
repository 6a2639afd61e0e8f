package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/wiring"
)

// reasons a dead letter can have: the Bus middleware's, and those of projections, ingress and changefeeds.
var reasons = []string{dlq.ReasonMaxAttempts, dlq.ReasonPermanent, dlq.ReasonDecode, dlq.ReasonMaxDeliveries, dlq.ReasonParked,
	dlq.ReasonProjection, dlq.ReasonIngress, dlq.ReasonChangefeed}

// dlqCmd is what every dlq subcommand shares: connection and filter flags, and the open Queue.
type dlqCmd struct {
	conn              *cli.Conn
	topic, group, key *string
	reason            *cli.Enum
	since, until      cli.Time
	limit             *int
	timeout           *time.Duration
	noValidate        *bool // replay's --no-validate
	tool              *wiring.Tool
	q                 *dlq.Queue
}

func newDLQCmd(cmd *cobra.Command, filters, limit, bounded bool) *dlqCmd {
	d := &dlqCmd{conn: cli.ConnFlags(cmd, false)}
	fs := cmd.Flags()
	if filters {
		d.topic = fs.String("topic", "", "only this topic")
		d.group = fs.String("group", "", "only this consumer group")
		d.key = fs.String("key", "", "only this event key")
		d.reason = cli.EnumFlag(cmd, "reason", "", "only this reason", reasons...)
		fs.Var(&d.since, "since", "dead-lettered at or after this time (RFC 3339, or a duration ago: 2h, 7d)")
		fs.Var(&d.until, "until", "dead-lettered before this time (RFC 3339, or a duration ago)")
	}
	if limit {
		d.limit = fs.Int("limit", 0, "at most this many (0: all)")
	}
	if bounded {
		d.timeout = fs.Duration("timeout", 5*time.Minute, "give up after this long")
	}
	return d
}

func (d *dlqCmd) filter() (dlq.Filter, error) {
	if d.topic == nil {
		return dlq.Filter{}, nil
	}
	if !d.since.T.IsZero() && !d.until.T.IsZero() && !d.until.T.After(d.since.T) {
		return dlq.Filter{}, cli.Usagef("--until (%s) must be after --since (%s)", d.until.String(), d.since.String())
	}
	return dlq.Filter{Topic: *d.topic, Group: *d.group, Reason: d.reason.Value, Key: *d.key, Since: d.since.T, Until: d.until.T}, nil
}

// open loads the configuration and opens the Queue as the processes configured it (a tool
// does not reset the DLQ stream's retention or replicas); validate also opens the schema
// registry, so that replays are validated.
func (d *dlqCmd) open(ctx context.Context, validate bool) (err error) {
	cfg, err := d.conn.Load()
	if err != nil {
		return err
	}
	d.tool, err = wiring.Open(ctx, cfg, "bridge dlq", wiring.Needs{DLQ: true, Validated: validate}, nil)
	if err != nil {
		return err
	}
	d.q = d.tool.DLQ
	return nil
}

func (d *dlqCmd) close() {
	if d.tool != nil {
		_ = d.tool.Close()
	}
}

// runE wraps a subcommand's work: check the filter, bound the time, open, close.
func (d *dlqCmd) runE(fn func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		f, err := d.filter()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if d.timeout != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *d.timeout)
			defer cancel()
		}
		defer d.close()
		if err := d.open(ctx, d.noValidate != nil && !*d.noValidate); err != nil {
			return err
		}
		return fn(ctx, cmd, f, args)
	}
}

func dlqCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect, replay and discard dead letters; sweep: the safety net"}

	list := &cobra.Command{Use: "list", Short: "List dead letters, oldest first (times in RFC 3339)"}
	ld := newDLQCmd(list, true, true, true)
	asJSON := list.Flags().Bool("json", false, "print one JSON object per line instead of a table")
	list.RunE = ld.runE(func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, _ []string) error {
		ls, err := ld.q.List(ctx, f, *ld.limit)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			for _, l := range ls {
				b, _ := json.Marshal(l)
				fmt.Fprintln(out, string(b))
			}
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tDEAD-LETTERED\tTOPIC\tGROUP\tREASON\tKEY\tATTEMPTS\tORIGINAL\tERROR")
		for _, l := range ls {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%q\t%d\t%s:%d\t%s\n", l.Seq, l.TS.UTC().Format(time.RFC3339),
				l.Topic, l.Group, l.Reason, l.Key, l.Attempts, l.OriginalStream, l.OriginalSeq, l.Error)
		}
		return tw.Flush()
	})

	count := &cobra.Command{Use: "count", Short: "Count the dead letters that match"}
	cd := newDLQCmd(count, true, false, true)
	count.RunE = cd.runE(func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, _ []string) error {
		n, err := cd.q.Count(ctx, f)
		if err == nil {
			fmt.Fprintln(cmd.OutOrStdout(), n)
		}
		return err
	})

	show := &cobra.Command{Use: "show SEQ", Short: "Show one dead letter as JSON", Args: cli.ExactArgs("SEQ")}
	sd := newDLQCmd(show, false, false, true)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		seq, err := strconv.ParseUint(args[0], 10, 64)
		if err != nil || seq == 0 {
			return cli.Usagef("SEQ %q is not a sequence number", args[0])
		}
		return sd.runE(func(ctx context.Context, cmd *cobra.Command, _ dlq.Filter, _ []string) error {
			l, err := sd.q.Show(ctx, seq)
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(l, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		})(cmd, args)
	}

	replay := &cobra.Command{Use: "replay", Short: "Republish dead letters to their topics (validated, partitioned by key) and remove them"}
	rd := newDLQCmd(replay, true, true, true)
	dryRun := replay.Flags().Bool("dry-run", false, "list what would be replayed, change nothing")
	rd.noValidate = replay.Flags().Bool("no-validate", false, "skip schema validation")
	force := replay.Flags().Bool("force", false, "replay messages ingress refused to topics that are not open to ingress (ingress.allow) too, bypassing its allow list")
	replay.RunE = rd.runE(func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, _ []string) error {
		pub := rd.tool.Publisher
		var bar *cli.Progress
		rep, err := rd.q.Replay(ctx, pub, dlq.ReplayOptions{Filter: f, Limit: *rd.limit, DryRun: *dryRun,
			IngressTopics: rd.tool.Config.Ingress.Allow, Force: *force,
			Progress: func(p dlq.ReplayProgress) {
				if bar == nil {
					bar = cli.NewProgress(cmd.ErrOrStderr(), "replay", p.Total)
				}
				bar.Set(p.Done, p.Failed)
			}})
		if bar != nil {
			bar.Finish()
		}
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *dryRun {
			for _, l := range rep.Letters {
				fmt.Fprintf(out, "would replay %d\t%s\t%s\tkey=%q\n", l.Seq, l.Topic, l.Group, l.Key)
			}
			return nil
		}
		fmt.Fprintf(out, "replayed %d of %d\n", rep.Replayed, len(rep.Letters))
		for seq, err := range rep.Failed {
			fmt.Fprintf(cmd.ErrOrStderr(), "%d: %v\n", seq, err)
		}
		if len(rep.Failed) > 0 {
			return cli.ErrSilent
		}
		return nil
	})

	discard := &cobra.Command{Use: "discard", Short: "Remove dead letters without replaying them (needs --yes)"}
	dd := newDLQCmd(discard, true, true, true)
	yes := discard.Flags().Bool("yes", false, "really remove them")
	discard.RunE = dd.runE(func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, _ []string) error {
		if !*yes {
			n, err := dd.q.Count(ctx, f)
			if err != nil {
				return err
			}
			return cli.Usagef("would remove %d dead letters; add --yes to remove them", n)
		}
		n, err := dd.q.Discard(ctx, f, *dd.limit)
		if err == nil {
			fmt.Fprintf(cmd.OutOrStdout(), "discarded %d\n", n)
		}
		return err
	})

	sweep := &cobra.Command{Use: "sweep", Short: "Move deliveries the server gave up on into the DLQ, until stopped (bridge run does this too)"}
	wd := newDLQCmd(sweep, false, false, false)
	every := sweep.Flags().Duration("every", dlq.DefaultSweepInterval, "how often to look")
	sweep.RunE = wd.runE(func(ctx context.Context, _ *cobra.Command, _ dlq.Filter, _ []string) error {
		err := wd.q.RunSweeper(ctx, *every)
		if ctx.Err() != nil {
			return nil
		}
		return err
	})

	cmd.AddCommand(list, count, show, replay, discard, sweep)
	return cmd
}
