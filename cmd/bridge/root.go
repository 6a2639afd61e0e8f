package main

import (
	"github.com/spf13/cobra"

	"github.com/jetbus/jetbus/internal/cli"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "bridge",
		Short: "jetbus's companion process (ingress, changefeeds, outbox, DLQ sweeper) and operator tools",
		Long: "bridge runs beside NATS: `bridge run` pushes the schemas, ensures the configured topics and runs ingress,\n" +
			"the changefeeds, the outbox drainers and the DLQ sweeper; the other commands inspect and repair.",
		Version: cli.Version(),
	}
	root.AddCommand(
		runCommand(),
		statusCommand(),
		cli.ConfigCommand(),
		schemaCommand(),
		lintCommand(),
		dlqCommand(),
	)
	return root
}
