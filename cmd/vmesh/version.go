package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/internal/buildinfo"
)

// versionReport is `vmesh version`'s output: this binary's build and, with
// --server, each server's (or why it could not be read).
type versionReport struct {
	Client  buildinfo.Info  `json:"client"`
	Servers []serverVersion `json:"servers,omitempty"`
}

type serverVersion struct {
	Server  string          `json:"server"`
	Version *buildinfo.Info `json:"version,omitempty"`
	Error   string          `json:"error,omitempty"`
}

func newVersionCmd() *cobra.Command {
	var servers []string
	var output string
	cmd := &cobra.Command{
		Use:   "version [--server ADDR]...",
		Short: "Print the vmesh version, and each server's with --server",
		Example: `  vmesh version
  vmesh version --server 127.0.0.1:15014 --server cp2.example.internal:15014 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			report := versionReport{Client: buildinfo.Get()}
			failed := false
			for _, s := range servers {
				sv := serverVersion{Server: s}
				var info buildinfo.Info
				if err := getJSON(s, "/version", &info); err != nil {
					sv.Error, failed = err.Error(), true
				} else {
					sv.Version = &info
				}
				report.Servers = append(report.Servers, sv)
			}
			err := writeOutput(cmd.OutOrStdout(), output, report, func(tw *tabwriter.Writer) error {
				if len(servers) == 0 {
					fmt.Fprintln(tw, "vmesh", report.Client)
					return nil
				}
				fmt.Fprintln(tw, "client: vmesh", report.Client)
				for _, sv := range report.Servers {
					if sv.Error != "" {
						fmt.Fprintf(tw, "server %s: unreachable: %s\n", sv.Server, sv.Error)
						continue
					}
					fmt.Fprintf(tw, "server %s: vmesh %s\n", sv.Server, sv.Version)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if failed {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&servers, "server", nil, "a control plane's HTTP address (host:15014); repeatable")
	outputFlag(cmd, &output)
	return cmd
}
