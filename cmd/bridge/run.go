package main

import (
	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
	"github.com/jetbus/jetbus/internal/wiring"
)

func runCommand() *cobra.Command {
	return cli.RunCommand("Run the bridge process until SIGTERM or SIGINT",
		"Run the bridge: register the schemas directory, ensure the configured topics, run the DLQ sweeper, the\n"+
			"declared changefeeds and outbox drainers, and ingress for the topics it allows; serve /healthz, /readyz,\n"+
			"/metrics and /v1/ops/status on http.addr. The first SIGTERM or SIGINT drains and exits 0 within\n"+
			"shutdown.timeout; a second exits at once.",
		wiring.Bridge)
}
