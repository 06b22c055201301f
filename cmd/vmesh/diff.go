package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/cmd/vmesh/internal/configdiff"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

func newDiffCmd() *cobra.Command {
	var o diffOptions
	cmd := &cobra.Command{
		Use:   "diff (--dir A --dir B | --from REV --to REV)",
		Short: "Show which proxies' xDS config a change would alter, resource by resource",
		Long: `diff generates every proxy's xDS resources from two versions of the config
and prints, per proxy, the resources added, removed and changed, with a
field-level diff. It never touches a running control plane.

Proxies come from --server (the proxies connected to a running vmesh, read from
its /debug/syncz), from --proxies FILE (a JSON list of {id, kind, namespace,
labels, serviceAccount, ips}), or, by default, one proxyless gRPC client per
namespace of the config.

After the diff it prints the warnings of the config after the change (as
vmesh validate does), "+" marking those the change brings; with --server,
hosts are checked against that control plane's registries too.

With --exit-code it exits as git diff --exit-code does: 0 when no proxy's
config changes, 1 when some does, 2 when the versions could not be compared
(a config error, an unknown revision): a pull request's CI can gate on it.
Git revisions may be any expression git knows in a local --git-repo
(HEAD~1, a short SHA, a tag, a branch).`,
		Example: `  vmesh diff --dir prod-before --dir prod-after
  vmesh diff --git-repo . --from origin/main --to HEAD --git-path mesh
  vmesh diff --exit-code --from HEAD~1 --to HEAD --git-path mesh
  vmesh diff --from main --to my-branch --server http://127.0.0.1:15014`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed, err := o.run(cmd)
			switch {
			case !o.exitCode:
				return err
			case err != nil:
				fmt.Fprintln(cmd.ErrOrStderr(), "vmesh:", err)
				return exitError{code: 2}
			case changed:
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.dirs, "dir", nil, "a config directory (give two: before, after)")
	f.StringVar(&o.gitRepo, "git-repo", ".", "git repository for --from/--to")
	f.StringVar(&o.gitPath, "git-path", "", "sub-folder of the repository")
	f.StringVar(&o.from, "from", "", "git revision before the change (default: the commit --server serves)")
	f.StringVar(&o.to, "to", "", "git revision after the change")
	f.StringVar(&o.proxiesFile, "proxies", "", "JSON file listing the proxies to compute")
	f.StringVar(&o.server, "server", "", "HTTP address of a running vmesh whose connected proxies to use")
	f.BoolVar(&o.asJSON, "json", false, "print JSON (-o json)")
	outputFlag(cmd, &o.output)
	gitVerboseFlag(cmd)
	f.BoolVar(&o.exitCode, "exit-code", false, "exit 1 when some proxy's config changes, 2 on an error (as git diff --exit-code)")
	return cmd
}

// diffOptions are vmesh diff's flags.
type diffOptions struct {
	dirs                                            []string
	gitRepo, gitPath, from, to, proxiesFile, server string
	asJSON, exitCode                                bool
	output                                          string
}

// run prints the diff and reports whether any proxy's config changes.
func (o *diffOptions) run(cmd *cobra.Command) (bool, error) {
	var before, after filestore.Loaded
	var err error
	switch {
	case len(o.dirs) == 2:
		if before, err = loadClean(o.dirs[0]); err != nil {
			return false, err
		}
		if after, err = loadClean(o.dirs[1]); err != nil {
			return false, err
		}
	case len(o.dirs) == 0 && o.to != "":
		if o.from == "" && o.server != "" {
			if o.from, err = servedCommit(o.server); err != nil {
				return false, err
			}
		}
		if o.from == "" {
			return false, fmt.Errorf("--from is required (or --server of a vmesh serving a git source)")
		}
		if before, err = loadGit(cmd, o.gitRepo, o.from, o.gitPath); err != nil {
			return false, err
		}
		if after, err = loadGit(cmd, o.gitRepo, o.to, o.gitPath); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("give --dir twice, or --to (and --from)")
	}
	proxies, err := diffProxies(o.server, o.proxiesFile, before.Objects, after.Objects)
	if err != nil {
		return false, err
	}
	diffs, err := configdiff.Diff(before.Objects, after.Objects, proxies)
	if err != nil {
		return false, err
	}
	var registry []*store.Object
	if o.server != "" {
		if registry, err = registryObjects(cmd, o.server); err != nil {
			return false, err
		}
	}
	warns, err := newWarnings(before, after, registry, o.server != "")
	if err != nil {
		return false, err
	}
	if o.asJSON {
		o.output = "json"
	}
	if o.output != "table" {
		// The JSON (or YAML) stays the list of proxy diffs; warnings go to
		// stderr.
		for _, w := range warns {
			fmt.Fprintln(cmd.ErrOrStderr(), w)
		}
		if diffs == nil {
			diffs = []configdiff.ProxyDiff{}
		}
		return configdiff.AnyChange(diffs), writeOutput(cmd.OutOrStdout(), o.output, diffs, nil)
	}
	fmt.Fprint(cmd.OutOrStdout(), configdiff.Format(diffs))
	if len(warns) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "\nwarnings after the change (%d; + new with it):\n", len(warns))
		for _, w := range warns {
			fmt.Fprintln(cmd.OutOrStdout(), w)
		}
	}
	return configdiff.AnyChange(diffs), nil
}

// newWarnings returns the warnings of the config after the change (the
// files' own and the analysis, with the registry objects of --server when
// complete), each prefixed "+ " when the config before did not have it,
// else "  ".
func newWarnings(before, after filestore.Loaded, registry []*store.Object, complete bool) ([]string, error) {
	had := map[string]bool{}
	old, err := warningsOf(before, registry, complete)
	if err != nil {
		return nil, err
	}
	for _, w := range old {
		had[warningText(w)] = true
	}
	now, err := warningsOf(after, registry, complete)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range now {
		if w.Severity != store.SeverityWarning {
			continue // infos: vmesh analyze
		}
		mark := "  "
		if !had[warningText(w)] {
			mark = "+ "
		}
		out = append(out, mark+w.Error())
	}
	return out, nil
}

// warningText is a warning without where it is (a line or commit that
// moved does not make it new).
func warningText(w store.ConfigError) string {
	w.Line, w.Commit = 0, ""
	return w.Error()
}

// loadClean loads a directory and fails on any config error: a diff of
// config that would be rejected would not show what proxies get.
func loadClean(dir string) (filestore.Loaded, error) {
	l, err := filestore.Load(dir)
	if err != nil {
		return l, err
	}
	if len(l.Errors) > 0 {
		return l, fmt.Errorf("%s has %d config error(s), first: %s", dir, len(l.Errors), l.Errors[0].Error())
	}
	return l, nil
}

func loadGit(cmd *cobra.Command, repo, ref, sub string) (filestore.Loaded, error) {
	l, err := checkGit(cmd, repo, ref, sub)
	if err != nil {
		return l, err
	}
	if len(l.Errors) > 0 {
		return l, fmt.Errorf("%s (%.12s) would be rejected: %s", ref, l.Commit, l.Errors[0].Error())
	}
	return l, nil
}

// diffProxies picks the proxies to compute for.
func diffProxies(server, file string, sets ...[]*store.Object) ([]*xds.Proxy, error) {
	switch {
	case server != "":
		return connectedProxies(server)
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var ps []*xds.Proxy
		if err := json.Unmarshal(data, &ps); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return ps, nil
	}
	var namespaces []string
	for _, set := range sets {
		for _, o := range set {
			if !slices.Contains(namespaces, o.Namespace) {
				namespaces = append(namespaces, o.Namespace)
			}
		}
	}
	slices.Sort(namespaces)
	var ps []*xds.Proxy
	for _, ns := range namespaces {
		ps = append(ps, &xds.Proxy{ID: ns + "/grpc-client", Kind: xds.KindGRPC, Namespace: ns})
	}
	return ps, nil
}
