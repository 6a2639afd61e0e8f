package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/devmode"
	"github.com/jetbus/jetbus/internal/process"
)

// NewLogger returns the processes' logger: JSON lines on w from level up.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// RunCommand is `<binary> run`: load the configuration, start dev mode when asked, and run the
// process that build describes until the first signal.
func RunCommand(short, long string, build func(cfg *config.Config) (process.Spec, error)) *cobra.Command {
	cmd := &cobra.Command{Use: "run", Short: short, Long: long, Args: NoArgs}
	conn := ConnFlags(cmd, true)
	dev := cmd.Flags().Bool("dev", false, "start the embedded NATS server and the MongoDB test backend in this process, where the configuration says NATS and MongoDB are (dev builds only)")
	devDir := cmd.Flags().String("dev-dir", "data", "with --dev: directory of the dev data: JetStream's store, and the MongoDB test backend's under mongo/")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *dev && !devmode.Available() {
			return &UsageError{Err: devmode.ErrNotBuilt}
		}
		cfg, err := conn.Load()
		if err != nil {
			return err
		}
		log := NewLogger(cmd.ErrOrStderr(), cfg.Log.Level)
		if *dev {
			mongoURI := cfg.Mongo.URI
			if mongoURI == "" {
				mongoURI = "mongodb://127.0.0.1:27017"
			}
			env, err := devmode.Start(devmode.Config{Dir: *devDir, NATSURL: cfg.NATS.URLs[0], MongoURI: mongoURI, Logger: log})
			if err != nil {
				return err
			}
			defer func() {
				if err := env.Close(); err != nil {
					log.Warn("dev environment", "error", err)
				}
			}()
			cfg.NATS.URLs, cfg.Mongo.URI = []string{env.NATSURL()}, env.MongoURI()
			fmt.Fprintf(cmd.OutOrStdout(), "dev mode: NATS %s (JetStream in %s), MongoDB %s\n", env.NATSURL(), *devDir, env.MongoURI())
		}
		spec, err := build(cfg)
		if err != nil {
			return err
		}
		spec.Config, spec.Logger = cfg, log
		return process.Run(cmd.Context(), spec)
	}
	return cmd
}

// ConfigCommand is `<binary> config check FILE`.
func ConfigCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check configuration files"}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a configuration file offline: every error with its file, line and key path",
		Long: "Check a configuration file as the processes do at start, without connecting: unknown keys, wrong types,\n" +
			"bad values, references to undeclared topics, projections and views, and the schema files. The environment\n" +
			"(JETBUS_*, ${NAME}) applies as it would at start. Exit 0 and OK, or 1 and one line per error.",
		Args: ExactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := config.Load(config.Options{File: args[0], Environ: os.Environ()})
			var errs config.Errors
			switch {
			case errors.As(err, &errs):
				for _, e := range errs {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%d error(s)\n", len(errs))
				return ErrSilent
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", args[0])
			return nil
		},
	}
	_ = check.MarkFlagFilename("config", "yaml", "yml")
	check.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	}
	cmd.AddCommand(check)
	return cmd
}
