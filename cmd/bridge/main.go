// Command bridge is jetbus's companion process and its tools: `bridge run` runs ingress,
// changefeeds, outbox drainers and the DLQ sweeper, and pushes the schemas at start; `bridge
// status`, `bridge dlq …`, `bridge schema …`, `bridge lint` and `bridge config check` are the
// operator's tools. `bridge --help` lists them; README.md has the reference.
//
// Exit status: 0 on success, 1 when a command fails or checks find problems, 2 on bad usage.
package main

import (
	"context"
	"io"
	"os"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/process"
)

func main() {
	ctx, stop := process.SignalContext(context.Background(), os.Stderr, os.Exit)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, newRoot(), args, stdout, stderr)
}
