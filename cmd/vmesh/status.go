package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/xds"
)

// statusTypes are the resource types shown, in order.
var statusTypes = []string{"LDS", "RDS", "CDS", "EDS"}

// proxyStatus is one row of `vmesh status`.
type proxyStatus struct {
	Replica string            `json:"replica"`
	Proxy   string            `json:"proxy"`
	Kind    string            `json:"kind"`
	Group   string            `json:"group"`
	Types   map[string]string `json:"types"` // type -> SYNCED (version) | STALE | NACK: msg
}

func newStatusCmd() *cobra.Command {
	var servers []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every connected proxy and whether it runs the latest config (like istioctl proxy-status)",
		Long: `status reads /debug/syncz from one or more replicas and prints, per proxy and
resource type, SYNCED (with the version the proxy ACKed: r<store revision>[@<commit>]),
STALE (a response it has not ACKed yet) or NACK with the proxy's error message.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []proxyStatus
			for _, srv := range servers {
				st, err := syncz(srv)
				if err != nil {
					return err
				}
				for _, s := range st {
					rows = append(rows, statusRow(srv, s))
				}
			}
			slices.SortFunc(rows, func(a, b proxyStatus) int {
				return cmp.Or(cmp.Compare(a.Proxy, b.Proxy), cmp.Compare(a.Replica, b.Replica))
			})
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "PROXY\tKIND\tREPLICA\t%s\tGROUP\n", strings.Join(statusTypes, "\t"))
			for _, r := range rows {
				cols := make([]string, len(statusTypes))
				for i, t := range statusTypes {
					cols[i] = cmp.Or(r.Types[t], "-")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Proxy, r.Kind, r.Replica, strings.Join(cols, "\t"), r.Group)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&servers, "server", []string{"127.0.0.1:15014"}, "HTTP address of a replica (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func statusRow(replica string, s xds.SyncStatus) proxyStatus {
	row := proxyStatus{Replica: replica, Proxy: s.ID, Kind: string(s.Kind), Group: s.Group, Types: map[string]string{}}
	for typ, ts := range s.Types {
		t := strings.ToUpper(typ)
		switch {
		case ts.Nack != "":
			row.Types[t] = "NACK: " + ts.Nack
		case ts.Sent != ts.Acked:
			row.Types[t] = "STALE (sent " + ts.Sent + ")"
		default:
			row.Types[t] = "SYNCED " + ts.Acked
		}
	}
	return row
}
