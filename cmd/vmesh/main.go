// Command vmesh is the vmesh control plane, its VM agent and its tools.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		var exit exitError
		if ok := asExit(err, &exit); ok {
			os.Exit(exit.code)
		}
		fmt.Fprintln(os.Stderr, "vmesh:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "vmesh",
		Short:         "A service-mesh control plane for VM and bare-metal fleets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newValidateCmd(), newDiffCmd(), newStatusCmd(), newConfigDumpCmd(), newTokenCmd(), newVMCmd(), newAgentCmd(), newVersionCmd())
	return root
}

// exitError ends the process with a code and no extra message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func asExit(err error, target *exitError) bool {
	e, ok := err.(exitError)
	if ok {
		*target = e
	}
	return ok
}
