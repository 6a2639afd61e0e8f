// Command bridge is jetbus's companion process. Subcommands:
//
//	bridge schema push [--nats-url URL] [--bucket NAME] DIR   push schema files to the registry
//	bridge schema check DIR                                   check schema files offline
//	bridge lint [--schemas DIR] [--tests] PATH...             lint publish calls
//	bridge dev [--dir data] [--nats-port 4222] [--mongo-addr ADDR] local NATS + MongoDB backend
//	bridge dlq list|count|show|replay|discard|sweep [flags]  dead-letter tools
//
// Exit status: 0 on success, 1 when checks find problems or a command fails, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/schema"
)

// command is one subcommand: run gets the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"schema", "manage schema files: push DIR, check DIR", runSchema},
		{"lint", "lint topics and headers of publish calls: lint [--schemas DIR] PATH...", runLint},
		{"dev", "run embedded NATS and the MongoDB test backend locally until interrupted", runDev},
		{"dlq", "inspect, replay and discard dead letters; sweep: the safety net", runDLQ},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches on the first argument.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "bridge: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bridge <command> [arguments]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

// parse parses flags placed before, between or after the positional arguments, and returns
// the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: bridge schema push [--nats-url URL] [--bucket NAME] DIR | bridge schema check DIR")
		return 2
	}
	switch args[0] {
	case "check":
		return schemaCheck(args[1:], stdout, stderr)
	case "push":
		return schemaPush(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bridge schema: unknown subcommand %q (want push or check)\n", args[0])
	return 2
}

func schemaCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bridge schema check", stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: bridge schema check DIR")
		return 2
	}
	probs, err := schema.CheckDir(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	for _, p := range probs {
		fmt.Fprintln(stderr, p)
	}
	if len(probs) > 0 {
		return 1
	}
	fmt.Fprintf(stdout, "%s: schemas OK\n", pos[0])
	return 0
}

func schemaPush(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bridge schema push", stderr)
	url := fs.String("nats-url", nats.DefaultURL, "NATS server URL(s), comma-separated")
	bucket := fs.String("bucket", schema.DefaultBucket, "KV bucket of the schema registry")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: bridge schema push [--nats-url URL] [--bucket NAME] DIR")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := nats.Connect(*url, nats.Name("jetbus bridge schema push"))
	if err != nil {
		fmt.Fprintf(stderr, "bridge: connect %s: %v\n", *url, err)
		return 1
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	reg, err := schema.Open(ctx, js, schema.WithBucket(*bucket))
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	defer reg.Close()
	pushed, err := schema.PushDir(ctx, reg, pos[0])
	for _, p := range pushed {
		what := "unchanged"
		if p.Created {
			what = "registered"
		}
		fmt.Fprintf(stdout, "%s v%d: %s\n", p.Topic, p.Version, what)
	}
	var probs schema.Problems
	switch {
	case errors.As(err, &probs):
		for _, p := range probs {
			fmt.Fprintln(stderr, p)
		}
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	return 0
}

func runLint(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bridge lint", stderr)
	schemas := fs.String("schemas", "", "schema directory: report published topics without a schema there")
	tests := fs.Bool("tests", false, "lint _test.go files too")
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "usage: bridge lint [--schemas DIR] [--tests] PATH...")
		return 2
	}
	findings, err := schema.Lint(schema.LintOptions{SchemasDir: *schemas, IncludeTests: *tests}, pos...)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
	for _, f := range findings {
		fmt.Fprintln(stderr, f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(stderr, "%d finding(s) in %s\n", len(findings), strings.Join(pos, " "))
		return 1
	}
	fmt.Fprintln(stdout, "lint OK")
	return 0
}
