// Command vmesh is the vmesh control plane, its VM agent and its tools.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/internal/refusal"
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
		os.Exit(exitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "vmesh",
		Short:         "A service-mesh control plane for VM and bare-metal fleets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// The commands that call a control plane's HTTP port read the token
	// file when they call it (see clientToken).
	var tokenFile string
	root.PersistentFlags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token of the control plane's HTTP port (vmesh serve --http-token-file); also $VMESH_TOKEN_FILE, or the token itself in $VMESH_TOKEN")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if tokenFile == "" {
			return nil
		}
		return os.Setenv(tokenFileEnv, tokenFile)
	}
	root.AddCommand(newServeCmd(), newValidateCmd(), newAnalyzeCmd(), newDiffCmd(), newStatusCmd(), newConfigDumpCmd(), newProxyConfigCmd(), newRolloutCmd(), newPinCmd(), newUnpinCmd(), newTokenCmd(), newCACmd(), newVMCmd(), newAgentCmd(), newVersionCmd())
	return root
}

// exitError ends the process with a code and no extra message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode is 1, or refusal.ExitPermanent when the control plane refused
// the agent for good: systemd then does not restart it, and a script can
// tell "fix the config" from "try again".
func exitCode(err error) int {
	if _, ok := errors.AsType[*refusal.PermanentError](err); ok {
		return refusal.ExitPermanent
	}
	return 1
}

func asExit(err error, target *exitError) bool {
	e, ok := err.(exitError)
	if ok {
		*target = e
	}
	return ok
}
