package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/schema"
)

const dlqUsage = `usage: bridge dlq <list|count|show|replay|discard|sweep> [flags]
  list    [filters] [--limit N] [--json]        dead letters, oldest first
  count   [filters]                             how many match
  show    SEQ                                   one dead letter, as JSON
  replay  [filters] [--limit N] [--dry-run]     republish to the original topics (validated) and remove
  discard [filters] [--limit N] --yes           remove without replaying
  sweep                                         move messages the server gave up on into the DLQ, until stopped
filters: --topic T --group G --reason R --key K --since D --until D (D: RFC 3339, or a duration ago such as 2h)`

// dlqFlags are the connection and filter flags every dlq subcommand shares.
type dlqFlags struct {
	url, topic, group, reason, key, since, until string
	limit                                        int
	timeout                                      time.Duration
}

func (f *dlqFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "nats-url", nats.DefaultURL, "NATS server URL(s), comma-separated")
	fs.StringVar(&f.topic, "topic", "", "only this topic")
	fs.StringVar(&f.group, "group", "", "only this consumer group")
	fs.StringVar(&f.reason, "reason", "", "only this reason (max-attempts, permanent, decode, max-deliveries, parked)")
	fs.StringVar(&f.key, "key", "", "only this event key")
	fs.StringVar(&f.since, "since", "", "dead-lettered at or after (RFC 3339, or a duration ago)")
	fs.StringVar(&f.until, "until", "", "dead-lettered before (RFC 3339, or a duration ago)")
	fs.IntVar(&f.limit, "limit", 0, "at most this many (0: all)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up after this long")
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339, s)
}

func (f *dlqFlags) filter() (dlq.Filter, error) {
	now := time.Now()
	since, err := parseWhen(f.since, now)
	if err != nil {
		return dlq.Filter{}, fmt.Errorf("--since: %w", err)
	}
	until, err := parseWhen(f.until, now)
	if err != nil {
		return dlq.Filter{}, fmt.Errorf("--until: %w", err)
	}
	return dlq.Filter{Topic: f.topic, Group: f.group, Reason: f.reason, Key: f.key, Since: since, Until: until}, nil
}

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, dlqUsage)
		return 2
	}
	sub := args[0]
	fs := newFlagSet("bridge dlq "+sub, stderr)
	var f dlqFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "list: one JSON object per line")
	dryRun := fs.Bool("dry-run", false, "replay: report what would be replayed, change nothing")
	yes := fs.Bool("yes", false, "discard: really remove")
	noValidate := fs.Bool("no-validate", false, "replay: skip schema validation")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return 2
	}
	switch sub {
	case "list", "count", "show", "replay", "discard", "sweep":
	default:
		fmt.Fprintln(stderr, dlqUsage)
		return 2
	}
	filter, err := f.filter()
	if err != nil {
		fmt.Fprintf(stderr, "bridge dlq: %v\n", err)
		return 2
	}
	if sub != "sweep" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	nc, err := nats.Connect(f.url, nats.Name("jetbus bridge dlq"))
	if err != nil {
		fmt.Fprintf(stderr, "bridge: connect %s: %v\n", f.url, err)
		return 1
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	defer q.Close()

	switch sub {
	case "list":
		ls, err := q.List(ctx, filter, f.limit)
		if err != nil {
			return fail(stderr, err)
		}
		for _, l := range ls {
			if *asJSON {
				b, _ := json.Marshal(l)
				fmt.Fprintln(stdout, string(b))
				continue
			}
			fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\t%s\tkey=%q attempts=%d original=%s:%d\t%s\n", l.Seq, l.TS.Format(time.RFC3339),
				l.Topic, l.Group, l.Reason, l.Key, l.Attempts, l.OriginalStream, l.OriginalSeq, l.Error)
		}
	case "count":
		n, err := q.Count(ctx, filter)
		if err != nil {
			return fail(stderr, err)
		}
		fmt.Fprintln(stdout, n)
	case "show":
		if len(pos) != 1 {
			fmt.Fprintln(stderr, "usage: bridge dlq show SEQ")
			return 2
		}
		seq, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "bridge dlq show: %q is not a sequence number\n", pos[0])
			return 2
		}
		l, err := q.Show(ctx, seq)
		if err != nil {
			return fail(stderr, err)
		}
		b, _ := json.MarshalIndent(l, "", "  ")
		fmt.Fprintln(stdout, string(b))
	case "replay":
		pub := jetbus.Bus(bus)
		if !*noValidate {
			reg, err := schema.Open(ctx, bus.JetStream())
			if err != nil {
				return fail(stderr, err)
			}
			defer reg.Close()
			vbus, err := jetstream.Open(ctx, nc, jetstream.WithPublishMiddleware(reg.PublishMiddleware()))
			if err != nil {
				return fail(stderr, err)
			}
			pub = vbus
		}
		rep, err := q.Replay(ctx, pub, dlq.ReplayOptions{Filter: filter, Limit: f.limit, DryRun: *dryRun,
			Progress: func(p dlq.ReplayProgress) {
				if p.Done%100 == 0 || p.Done == p.Total {
					fmt.Fprintf(stderr, "replayed %d/%d (%d failed)\n", p.Done-p.Failed, p.Total, p.Failed)
				}
			}})
		if err != nil {
			return fail(stderr, err)
		}
		if *dryRun {
			for _, l := range rep.Letters {
				fmt.Fprintf(stdout, "would replay %d\t%s\t%s\tkey=%q\n", l.Seq, l.Topic, l.Group, l.Key)
			}
			return 0
		}
		fmt.Fprintf(stdout, "replayed %d of %d\n", rep.Replayed, len(rep.Letters))
		for seq, err := range rep.Failed {
			fmt.Fprintf(stderr, "%d: %v\n", seq, err)
		}
		if len(rep.Failed) > 0 {
			return 1
		}
	case "discard":
		if !*yes {
			n, err := q.Count(ctx, filter)
			if err != nil {
				return fail(stderr, err)
			}
			fmt.Fprintf(stderr, "bridge dlq discard: would remove %d dead letters; add --yes to remove them\n", n)
			return 2
		}
		n, err := q.Discard(ctx, filter, f.limit)
		if err != nil {
			return fail(stderr, err)
		}
		fmt.Fprintf(stdout, "discarded %d\n", n)
	case "sweep":
		if err := q.RunSweeper(ctx, time.Second); err != nil && !errors.Is(err, context.Canceled) {
			return fail(stderr, err)
		}
	}
	return 0
}

func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "bridge: %v\n", err)
	return 1
}
