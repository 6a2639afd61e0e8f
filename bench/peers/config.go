package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// errInvalidConfig is wrapped by every Config.Validate error.
var errInvalidConfig = errors.New("peers: invalid config")

// Scenario names, in the order they run.
const (
	scenarioPublish    = "publish"
	scenarioSync       = "sync"
	scenarioConsume    = "consume"
	scenarioDecode     = "decode"
	scenarioPartitions = "partitions"
)

var allScenarios = []string{scenarioPublish, scenarioSync, scenarioConsume, scenarioDecode, scenarioPartitions}

// Config is what one run measures.
type Config struct {
	// Rounds is how many rounds every scenario runs (each side once per round).
	Rounds int
	// PublishEvents is how many events each side publishes per round (publish).
	PublishEvents int
	// SyncEvents is how many synchronous publishes each side times per round (sync).
	SyncEvents int
	// ConsumeEvents is how many stored events each side consumes per round (consume, decode).
	ConsumeEvents int
	// PartitionedEvents is how many stored events each side consumes per round (partitions).
	PartitionedEvents int
	// Partitions is the partition count of the partitions scenario's topics.
	Partitions int
	// WatermillPublishers is how many goroutines the concurrent Watermill publish side uses
	// (0 leaves that side out).
	WatermillPublishers int
	// Scenarios lists the scenarios to run (see allScenarios).
	Scenarios []string
	// CPUProfile, when set, is the file a CPU profile of the whole run is written to.
	CPUProfile string
	// SideTimeout bounds one side's run in one round.
	SideTimeout time.Duration
	// Sides, when not empty, keeps only the sides whose name contains one of these strings
	// (the others are not run); the ratios are then to the first side kept.
	Sides []string
}

// defaultConfig is sized so that a full run takes a few minutes on two cores.
func defaultConfig() Config {
	return Config{
		Rounds:              5,
		PublishEvents:       50_000,
		SyncEvents:          5_000,
		ConsumeEvents:       100_000,
		PartitionedEvents:   100_000,
		Partitions:          16,
		WatermillPublishers: 16,
		Scenarios:           allScenarios,
		SideTimeout:         5 * time.Minute,
	}
}

// Validate reports whether c is usable; errors wrap errInvalidConfig and name the field.
func (c Config) Validate() error {
	switch {
	case c.Rounds < 1:
		return fmt.Errorf("%w: Rounds must be at least 1, got %d", errInvalidConfig, c.Rounds)
	case c.PublishEvents < 1:
		return fmt.Errorf("%w: PublishEvents must be at least 1, got %d", errInvalidConfig, c.PublishEvents)
	case c.SyncEvents < 1:
		return fmt.Errorf("%w: SyncEvents must be at least 1, got %d", errInvalidConfig, c.SyncEvents)
	case c.ConsumeEvents < 1:
		return fmt.Errorf("%w: ConsumeEvents must be at least 1, got %d", errInvalidConfig, c.ConsumeEvents)
	case c.PartitionedEvents < 1:
		return fmt.Errorf("%w: PartitionedEvents must be at least 1, got %d", errInvalidConfig, c.PartitionedEvents)
	case c.Partitions < 1 || c.Partitions > 4096:
		return fmt.Errorf("%w: Partitions must be in [1, 4096], got %d", errInvalidConfig, c.Partitions)
	case c.WatermillPublishers < 0:
		return fmt.Errorf("%w: WatermillPublishers must not be negative, got %d", errInvalidConfig, c.WatermillPublishers)
	case len(c.Scenarios) == 0:
		return fmt.Errorf("%w: Scenarios is empty", errInvalidConfig)
	case c.SideTimeout <= 0:
		return fmt.Errorf("%w: SideTimeout must be positive, got %s", errInvalidConfig, c.SideTimeout)
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(allScenarios, s) {
			return fmt.Errorf("%w: Scenarios: unknown scenario %q (known: %s)", errInvalidConfig, s, strings.Join(allScenarios, ","))
		}
	}
	return nil
}

// runs reports whether scenario s is selected.
func (c Config) runs(s string) bool { return slices.Contains(c.Scenarios, s) }

// keeps reports whether the side named name is selected (Sides).
func (c Config) keeps(name string) bool {
	if len(c.Sides) == 0 {
		return true
	}
	return slices.ContainsFunc(c.Sides, func(part string) bool { return strings.Contains(name, part) })
}

// parseFlags returns the Config that args describe, on top of defaultConfig.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds per scenario (each side once per round; use at least 5 for a table)")
	fs.IntVar(&c.PublishEvents, "publish", c.PublishEvents, "events per side per round in the publish scenario")
	fs.IntVar(&c.SyncEvents, "sync", c.SyncEvents, "synchronous publishes per side per round in the sync scenario")
	fs.IntVar(&c.ConsumeEvents, "consume", c.ConsumeEvents, "stored events per side per round in the consume and decode scenarios")
	fs.IntVar(&c.PartitionedEvents, "partitioned", c.PartitionedEvents, "stored events per side per round in the partitions scenario")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partition count in the partitions scenario")
	fs.IntVar(&c.WatermillPublishers, "wm-publishers", c.WatermillPublishers, "goroutines of the concurrent Watermill publish side (0: leave it out)")
	scenarios := fs.String("scenarios", strings.Join(c.Scenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ","))
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.DurationVar(&c.SideTimeout, "side-timeout", c.SideTimeout, "bound on one side's run in one round")
	sides := fs.String("sides", "", "parts of side names separated by ';' (names hold commas): run only the sides whose name contains one (default: all)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q", errInvalidConfig, fs.Args())
	}
	for _, s := range strings.Split(*sides, ";") {
		if s = strings.TrimSpace(s); s != "" {
			c.Sides = append(c.Sides, s)
		}
	}
	c.Scenarios = nil
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(c.Scenarios, s) {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	return c, c.Validate()
}
