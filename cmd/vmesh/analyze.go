package main

import (
	"fmt"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"

	"github.com/spf13/cobra"
)

func newAnalyzeCmd() *cobra.Command {
	var in configInput
	var output string
	cmd := &cobra.Command{
		Use:   "analyze [PATH...]",
		Short: "Find config that applies but does nothing, or not what it says, like istioctl analyze",
		Long: `Analyze reads files, directories or a git ref's tree as one config set and
prints what the set as a whole gets wrong, with Istio's analysis codes where
Istio has one (IST0101 a subset, host or gateway that does not exist; IST0109
two VirtualServices for one host) and vmesh's otherwise (VM2001 a short host
that qualifies to no service, VM2002 a VirtualService or DestinationRule for a
host no ServiceEntry defines, VM2003 a WorkloadEntry no ServiceEntry selects,
VM2004 a WorkloadGroup no ServiceEntry selects), what each object asks for
that vmesh does not enforce (VM1xxx), and, as infos, what proxyless gRPC
clients ignore while Envoy sidecars apply it (VM1101):
  file:line: kind/namespace/name: field: warning CODE: message
Files are checked without the registries (Consul, ZooKeeper) a control plane
also reads: a host no file defines is an info, not a warning, unless --server
names a running control plane whose registry objects complete the set (the
running control plane analyses every source itself: /debug/config). Config
errors are printed too. It exits 1 on an error or a warning, and 0 otherwise (infos
only). vmesh validate prints the same warnings. -o json|yaml prints
{objects, errors, warnings, routeStatus}. The Kubernetes Gateway API routes' status,
which an API server would hold, is printed after the warnings, one line per
parentRef with its Accepted and ResolvedRefs conditions and their reasons:
  file:line: HTTPRoute/namespace/name: parent KIND/namespace/name: Accepted=True (Accepted) ResolvedRefs=False (BackendNotFound: ...)`,
		Example: `  vmesh analyze examples/quickstart
  vmesh analyze --git-ref origin/main mesh/
  vmesh analyze --server 127.0.0.1:15014 mesh/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, warns, err := in.load(cmd, args, "analyzing")
			if err != nil {
				return err
			}
			if err := writeReport(cmd, output, l, warns, true, routeStatus(l.Objects)); err != nil {
				return err
			}
			nw := countWarnings(warns)
			fmt.Fprintf(cmd.ErrOrStderr(), "%d object(s): %d error(s), %d warning(s), %d info(s)\n", len(l.Objects), len(l.Errors), nw, len(warns)-nw)
			if len(l.Errors) > 0 || nw > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	in.flags(cmd)
	outputFlag(cmd, &output)
	return cmd
}

// routeStatus is the status of the Gateway API routes among objs, as the
// control plane computes it (/debug/config's routeStatus).
func routeStatus(objs []*store.Object) []gatewayapi.RouteStatus {
	st := store.NewStore()
	seen := map[store.Key]bool{}
	var set []*store.Object
	for _, o := range objs {
		if !seen[o.Key] {
			seen[o.Key] = true
			set = append(set, o)
		}
	}
	if err := st.Replace(store.Source{Name: "config", Class: store.ClassConfig}, set); err != nil {
		return nil
	}
	return gatewayapi.Convert(st.Snapshot()).Status
}
