package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/xds"
)

func newConfigDumpCmd() *cobra.Command {
	var server, output string
	cmd := &cobra.Command{
		Use:   "config-dump PROXY",
		Short: "Print the xDS resources a connected proxy holds (JSON by default)",
		Long: `config-dump prints /debug/config_dump for one proxy: the resources its
streams hold, by type and name, as Envoy's JSON (-o json, the default, or
-o yaml), or one line per resource with its version (-o table). proxy-config
shows one type at a time as tables.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeProxyIDs(&server),
		RunE: func(cmd *cobra.Command, args []string) error {
			var dump json.RawMessage
			if err := getJSON(server, "/debug/config_dump?proxy="+url.QueryEscape(args[0]), &dump); err != nil {
				return err
			}
			var parsed xds.ConfigDump
			if err := json.Unmarshal(dump, &parsed); err != nil {
				return fmt.Errorf("config dump of %s: %w", args[0], err)
			}
			var pretty any
			if err := json.Unmarshal(dump, &pretty); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, pretty, func(tw *tabwriter.Writer) error {
				fmt.Fprintln(tw, "STREAM\tTYPE\tNAME\tVERSION")
				for _, s := range parsed.Streams {
					for _, t := range slices.Sorted(maps.Keys(s.Versions)) {
						for _, n := range slices.Sorted(maps.Keys(s.Versions[t])) {
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Protocol, t, n, s.Versions[t][n])
						}
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica the proxy is connected to")
	cmd.Flags().StringVarP(&output, "output", "o", "json", "output format: json, yaml or table")
	return cmd
}
