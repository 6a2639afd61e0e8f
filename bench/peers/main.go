package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the scenarios args select, writes progress to stderr and the Markdown table to
// stdout. Exit status: 0 on success, 1 when a run fails, 2 on bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	results, err := runScenarios(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "peers:", err)
		return 1
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(time.Second))
	fmt.Fprintln(stdout, describe(cfg))
	fmt.Fprintln(stdout)
	writeTable(stdout, results)
	fmt.Fprintln(stdout)
	writePaired(stdout, results)
	return 0
}

// runScenarios runs the selected scenarios in their fixed order against one server.
func runScenarios(ctx context.Context, cfg Config, progress io.Writer) ([]*result, error) {
	e, err := startEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var results []*result
	add := func(r *result, err error) error {
		if err == nil {
			results = append(results, r)
		}
		return err
	}
	if cfg.runs(scenarioPublish) {
		if err := add(publishScenario(ctx, e, cfg, progress)); err != nil {
			return nil, err
		}
	}
	if cfg.runs(scenarioSync) {
		if err := add(syncScenario(ctx, e, cfg, progress)); err != nil {
			return nil, err
		}
	}
	if cfg.runs(scenarioConsume) || cfg.runs(scenarioDecode) {
		topics, err := e.fillConsumeTopics(ctx, cfg.ConsumeEvents, progress)
		if err != nil {
			return nil, err
		}
		for _, sc := range []struct {
			name string
			h    handler
		}{{scenarioConsume, noop}, {scenarioDecode, decode}} {
			if !cfg.runs(sc.name) {
				continue
			}
			if err := add(consumeScenario(ctx, e, cfg, sc.name, topics, sc.h, progress)); err != nil {
				return nil, err
			}
		}
	}
	if cfg.runs(scenarioPartitions) {
		if err := add(partitionsScenario(ctx, e, cfg, progress)); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// describe says what was measured on what, for the line above the table.
func describe(cfg Config) string {
	versions := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			versions[d.Path] = d.Version
		}
	}
	return fmt.Sprintf("%s, GOMAXPROCS %d, %s; nats-server %s embedded (file storage), nats.go %s, watermill %s, watermill-nats %s; "+
		"%d rounds; publish %d, sync %d, consume %d, partitioned %d events per side per round.",
		cpuModel(), runtime.GOMAXPROCS(0), runtime.Version(), server.VERSION,
		versions["github.com/nats-io/nats.go"], versions["github.com/ThreeDotsLabs/watermill"],
		versions["github.com/ThreeDotsLabs/watermill-nats/v2"],
		cfg.Rounds, cfg.PublishEvents, cfg.SyncEvents, cfg.ConsumeEvents, cfg.PartitionedEvents)
}

// cpuModel returns the CPU's model name where /proc/cpuinfo tells it.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
