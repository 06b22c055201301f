package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/internal/buildinfo"
)

func newVersionCmd() *cobra.Command {
	var servers []string
	cmd := &cobra.Command{
		Use:   "version [--server ADDR]...",
		Short: "Print the vmesh version, and each server's with --server",
		Example: `  vmesh version
  vmesh version --server 127.0.0.1:15014 --server cp2.example.internal:15014`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if len(servers) == 0 {
				fmt.Fprintln(out, "vmesh", buildinfo.Get())
				return nil
			}
			fmt.Fprintln(out, "client: vmesh", buildinfo.Get())
			failed := false
			for _, s := range servers {
				var info buildinfo.Info
				if err := getJSON(s, "/version", &info); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "server %s: %v\n", s, err)
					failed = true
					continue
				}
				fmt.Fprintf(out, "server %s: vmesh %s\n", s, info)
			}
			if failed {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&servers, "server", nil, "a control plane's HTTP address (host:15014); repeatable")
	return cmd
}
