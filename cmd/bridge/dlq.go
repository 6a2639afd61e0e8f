package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/wiring"
)

// listBlock is how many rows of dlq list's table are aligned and printed together.
const listBlock = 256

// maxFailuresShown bounds the failures dlq replay prints one by one.
const maxFailuresShown = 1000

// reasons a dead letter can have: the Bus middleware's, and those of projections, ingress and changefeeds.
var reasons = []string{dlq.ReasonMaxAttempts, dlq.ReasonPermanent, dlq.ReasonDecode, dlq.ReasonMaxDeliveries, dlq.ReasonParked,
	dlq.ReasonProjection, dlq.ReasonIngress, dlq.ReasonChangefeed}

// dlqCmd is what every dlq subcommand shares: connection and filter flags, and the open Queue.
type dlqCmd struct {
	conn              *cli.Conn
	topic, group, key *string
	reason            *cli.Enum
	since, until      cli.Time
	from              positionFlag
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
		fs.Var(&d.from, "from-seq", "start at this position, skipping older letters: a DLQ sequence, or rejects:<seq> for ingress's refusals, read after the DLQ (what an interrupted replay printed, to go on)")
	}
	if limit {
		d.limit = fs.Int("limit", 0, "at most this many (0: all)")
	}
	if bounded {
		d.timeout = fs.Duration("timeout", 5*time.Minute, "give up after this long (0: never)")
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
	return dlq.Filter{Topic: *d.topic, Group: *d.group, Reason: d.reason.Value, Key: *d.key, Since: d.since.T, Until: d.until.T, From: d.from.p}, nil
}

// positionFlag is --from-seq: a dlq.Position as the commands print it.
type positionFlag struct{ p dlq.Position }

func (f *positionFlag) String() string {
	if f.p == (dlq.Position{}) {
		return ""
	}
	return f.p.String()
}
func (f *positionFlag) Type() string { return "seq" }
func (f *positionFlag) Set(s string) error {
	p, err := dlq.ParsePosition(s)
	if err != nil {
		return errors.New("want a DLQ sequence number or rejects:<seq>, as dlq list or an interrupted replay prints it")
	}
	f.p = p
	return nil
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
		if d.timeout != nil && *d.timeout > 0 {
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

	list := &cobra.Command{Use: "list", Short: "List dead letters, oldest first (times in RFC 3339), as they are read: the DLQ's, then ingress's refusals (SEQ rejects:<seq>)"}
	ld := newDLQCmd(list, true, true, true)
	asJSON := list.Flags().Bool("json", false, "print one JSON object per line instead of a table")
	list.RunE = ld.runE(func(ctx context.Context, cmd *cobra.Command, f dlq.Filter, _ []string) error {
		out := cmd.OutOrStdout()
		n := 0
		if *asJSON {
			var werr error
			err := ld.q.Each(ctx, f, func(l *dlq.Letter) bool {
				b, _ := json.Marshal(l)
				_, werr = fmt.Fprintln(out, string(b))
				n++
				return werr == nil && (*ld.limit <= 0 || n < *ld.limit)
			})
			return errors.Join(err, werr)
		}
		// The table is printed a block of rows at a time (each block aligned on its own), so
		// that letters show as they are read and none is held longer.
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tDEAD-LETTERED\tTOPIC\tGROUP\tREASON\tKEY\tATTEMPTS\tORIGINAL\tERROR")
		var werr error
		err := ld.q.Each(ctx, f, func(l *dlq.Letter) bool {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%q\t%d\t%s:%d\t%s\n", l.Position(), l.TS.UTC().Format(time.RFC3339),
				l.Topic, l.Group, l.Reason, l.Key, l.Attempts, l.OriginalStream, l.OriginalSeq, l.Error)
			n++
			if n%listBlock == 0 {
				werr = tw.Flush()
			}
			return werr == nil && (*ld.limit <= 0 || n < *ld.limit)
		})
		return errors.Join(err, werr, tw.Flush())
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

	show := &cobra.Command{Use: "show SEQ", Short: "Show one dead letter as JSON (SEQ as dlq list prints it: rejects:<seq> for ingress's refusals)", Args: cli.ExactArgs("SEQ")}
	sd := newDLQCmd(show, false, false, true)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		pos, err := dlq.ParsePosition(args[0])
		if err != nil {
			return cli.Usagef("SEQ %q is not a sequence number", args[0])
		}
		return sd.runE(func(ctx context.Context, cmd *cobra.Command, _ dlq.Filter, _ []string) error {
			l, err := sd.q.ShowAt(ctx, pos)
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
		out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
		var bar *cli.Progress
		shown := 0 // failures printed
		rep, err := rd.q.Replay(ctx, pub, dlq.ReplayOptions{Filter: f, Limit: *rd.limit, DryRun: *dryRun,
			IngressTopics: rd.tool.Config.Ingress.Allow, Force: *force,
			OnLetter: func(l *dlq.Letter, _ *jetbus.Event, err error) {
				switch {
				case *dryRun:
					fmt.Fprintf(out, "would replay %s\t%s\t%s\tkey=%q\n", l.Position(), l.Topic, l.Group, l.Key)
				case err != nil && shown < maxFailuresShown:
					shown++
					fmt.Fprintf(errOut, "%s: %v\n", l.Position(), err)
				}
			},
			Progress: func(p dlq.ReplayProgress) {
				if *dryRun {
					return
				}
				if bar == nil {
					bar = cli.NewProgress(errOut, "replay", p.Total)
				}
				bar.SetTotal(p.Total)
				bar.Set(p.Done, p.Failed)
			}})
		if bar != nil {
			if rep != nil { // the total was an estimate from above: end the bar at what was done
				bar.SetTotal(rep.Replayed + rep.FailedCount)
				bar.Set(rep.Replayed+rep.FailedCount, rep.FailedCount)
			}
			bar.Finish()
		}
		if rep == nil {
			return err
		}
		if *dryRun {
			return err
		}
		if rep.FailedCount > shown {
			fmt.Fprintf(errOut, "(%d more failures not shown)\n", rep.FailedCount-shown)
		}
		fmt.Fprintf(out, "replayed %d of %d", rep.Replayed, rep.Selected)
		if rep.FailedCount > 0 {
			fmt.Fprintf(out, ", %d failed (left in the DLQ)", rep.FailedCount)
		}
		if rep.Last != (dlq.Position{}) {
			fmt.Fprintf(out, "; last letter handled: %s", rep.Last)
		}
		fmt.Fprintln(out)
		if rep.Resume != (dlq.Position{}) {
			fmt.Fprintf(out, "to go on from the first letter not replayed: --from-seq %s\n", rep.Resume)
		}
		if err != nil {
			return err
		}
		if rep.FailedCount > 0 {
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
