package main

import (
	"encoding/json"
	"net/url"

	"github.com/spf13/cobra"
)

func newConfigDumpCmd() *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:               "config-dump PROXY",
		Short:             "Print the xDS resources a connected proxy has, as JSON",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeProxyIDs(&server),
		RunE: func(cmd *cobra.Command, args []string) error {
			var dump json.RawMessage
			if err := getJSON(server, "/debug/config_dump?proxy="+url.QueryEscape(args[0]), &dump); err != nil {
				return err
			}
			var pretty any
			if err := json.Unmarshal(dump, &pretty); err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(pretty)
		},
	}
	cmd.Flags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica the proxy is connected to")
	return cmd
}
