package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is a command line that cannot run: it exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ErrSilent is a failure whose details the command already printed: exit 1 without a line.
var ErrSilent = errors.New("failed")

// Execute runs root with args and returns the exit status. Errors are printed to stderr as
// "<root>: <error>", usage errors followed by a hint to --help.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SilenceErrors = true
	root.SilenceUsage = true
	Prepare(root)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, ErrSilent) {
		return ExitFailure
	}
	var ue *UsageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
	return ExitFailure
}

// Prepare completes root as Execute runs it: the completion command, the --version flag,
// flag errors as usage errors, and strict arguments everywhere. Reference and tests call it
// to see the same tree.
func Prepare(root *cobra.Command) *cobra.Command {
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: err}
	})
	strict(root)
	return root
}

// isCobraUsage recognizes the errors cobra returns before a command runs.
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.HasPrefix(s, "invalid argument") ||
		strings.Contains(s, "flag needs an argument") || strings.HasPrefix(s, "required flag")
}

// strict makes every command check its arguments: a command with subcommands refuses an
// unknown one and, run alone, says a subcommand is missing (cobra would print help and exit
// 0); a command without an Args rule takes no arguments.
func strict(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strict(sub)
	}
	if c.HasSubCommands() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return Usagef("unknown command %q for %q (want one of: %s)", args[0], cmd.CommandPath(), strings.Join(subNames(cmd), ", "))
			}
			return nil
		}
		if c.RunE == nil && c.Run == nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				return Usagef("%s needs a command: %s", cmd.CommandPath(), strings.Join(subNames(cmd), ", "))
			}
		}
		return
	}
	if c.Args == nil {
		c.Args = NoArgs
	}
}

func subNames(c *cobra.Command) []string {
	var out []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, s.Name())
		}
	}
	return out
}

// NoArgs refuses any argument.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("%s takes no arguments; got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// ExactArgs wants one argument per name.
func ExactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return Usagef("%s needs %s", cmd.CommandPath(), strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			return Usagef("%s takes %d argument(s) (%s); unexpected %q", cmd.CommandPath(), len(names), strings.Join(names, " "), args[len(names)])
		}
		return nil
	}
}

// MinArgs wants at least one argument.
func MinArgs(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return Usagef("%s needs at least one %s", cmd.CommandPath(), name)
		}
		return nil
	}
}

// Visit calls fn for c and every command below it, depth first in name order.
func Visit(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		Visit(s, fn)
	}
}

// flagsOf returns c's flags other than help.
func flagsOf(c *cobra.Command, keep func(*pflag.Flag) bool) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && keep(f) {
			fs.AddFlag(f)
		}
	})
	return fs
}
