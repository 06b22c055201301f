package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// completeProxyIDs completes a PROXY argument with the ids of the proxies
// connected to the replica *server names (the command's --server flag,
// already parsed when the shell asks). `vmesh completion bash|zsh|fish`
// prints the scripts that call it.
func completeProxyIDs(server *string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		st, err := syncz(*server)
		if err != nil {
			return cobra.AppendActiveHelp(nil, "cannot list proxies: "+err.Error()), cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		seen := map[string]bool{}
		for _, s := range st {
			if strings.HasPrefix(s.ID, toComplete) && !seen[s.ID] {
				seen[s.ID] = true
				ids = append(ids, s.ID+"\t"+string(s.Kind)+" in "+s.Namespace)
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}
