// Command projector materializes topics into MongoDB views and serves them: `projector run`
// runs the configured projections as partitioned replicas (start more processes to share the
// partitions) and the snapshot API; `projector rebuild NAME` rebuilds one projection.
// `projector --help` lists the commands; README.md has the reference.
//
// Exit status: 0 on success, 1 when a command fails, 2 on bad usage.
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
