package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/wiring"
	"github.com/jetbus/jetbus/schema"
)

func schemaCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "schema", Short: "Check and register JSON Schema files (<dir>/<topic>/v<N>.json)"}

	check := &cobra.Command{
		Use:   "check DIR",
		Short: "Check schema files offline (names, JSON, sidecars, compatibility between versions), for CI",
		Args:  cli.ExactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			probs, err := schema.CheckDir(args[0])
			if err != nil {
				return err
			}
			for _, p := range probs {
				fmt.Fprintln(cmd.ErrOrStderr(), p)
			}
			if len(probs) > 0 {
				return cli.ErrSilent
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: schemas OK\n", args[0])
			return nil
		},
	}

	push := &cobra.Command{
		Use:   "push [DIR]",
		Short: "Register schema files in the registry, idempotently (DIR defaults to the configuration's schemas)",
		Args:  cobra.MaximumNArgs(1),
	}
	conn := cli.ConnFlags(push, false)
	bucket := push.Flags().String("bucket", schema.DefaultBucket, "KV bucket of the schema registry")
	timeout := push.Flags().Duration("timeout", 30*time.Second, "give up after this long")
	push.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := conn.Load()
		if err != nil {
			return err
		}
		dir := cfg.Schemas
		if len(args) == 1 {
			dir = args[0]
		}
		if dir == "" {
			return cli.Usagef("%s needs DIR (or a configuration with schemas)", cmd.CommandPath())
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		t, err := wiring.Open(ctx, cfg, "bridge schema push", wiring.Needs{Schemas: true, SchemaBucket: *bucket}, nil)
		if err != nil {
			return err
		}
		defer t.Close()
		pushed, err := schema.PushDir(ctx, t.Schemas, dir)
		for _, p := range pushed {
			what := "unchanged"
			if p.Created {
				what = "registered"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s v%d: %s\n", p.Topic, p.Version, what)
		}
		var probs schema.Problems
		if errors.As(err, &probs) {
			for _, p := range probs {
				fmt.Fprintln(cmd.ErrOrStderr(), p)
			}
			return cli.ErrSilent
		}
		return err
	}
	cmd.AddCommand(check, push)
	return cmd
}

func lintCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lint PATH...",
		Short: "Lint publish calls (Go, JS/TS, Python): invalid topics, topics without a schema, bad headers",
		Args:  cli.MinArgs("PATH"),
	}
	schemas := cmd.Flags().String("schemas", "", "schema directory: report published topics without a schema there")
	tests := cmd.Flags().Bool("tests", false, "lint _test.go files too")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		findings, err := schema.Lint(schema.LintOptions{SchemasDir: *schemas, IncludeTests: *tests}, args...)
		if err != nil {
			return err
		}
		for _, f := range findings {
			fmt.Fprintln(cmd.ErrOrStderr(), f)
		}
		if len(findings) > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "%d finding(s) in %s\n", len(findings), strings.Join(args, " "))
			return cli.ErrSilent
		}
		fmt.Fprintln(cmd.OutOrStdout(), "lint OK")
		return nil
	}
	return cmd
}
