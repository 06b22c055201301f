package main

import (
	"encoding/json"
	"fmt"
	"os"

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
its /debug/syncz, each with the resources it holds from /debug/config_dump) or
from --proxies FILE (a JSON list of {id, kind, namespace, labels,
serviceAccount, ips}). A proxy is listed as changing a resource only when it
holds it: a proxyless gRPC server that holds only its listener does not
change its routes.

A gate must not pass because no proxy happened to be looked at: for every
group of proxies the change touches (a kind, and what the config gives the
proxies of a namespace, a WorkloadEntry, a WorkloadGroup or a ServiceEntry
endpoint) that none of the proxies given is in, and for all of them when no
proxy is given or connected, the diff is computed against one
representative proxy of the group, marked as such, and a note says how many
groups had no proxy.

After the diff it prints the warnings of the config after the change (as
vmesh validate does), "+" marking those the change brings; with --server,
hosts are checked against that control plane's registries too. A config
error the change brings is printed instead of the diff.

With --exit-code it exits as git diff --exit-code does: 0 when no proxy's
config changes, 1 when some does or the change brings a config error (vmesh
would reject it), 2 when the versions could not be compared (an unknown
revision, a config error already there before the change). --strict (implies
--exit-code) exits 1 on a warning the change brings too, as vmesh validate
--strict does: a pull request's CI can gate on it. Git revisions may be any
expression git knows in a local --git-repo (HEAD~1, a short SHA, a tag, a
branch).`,
		Example: `  vmesh diff --dir prod-before --dir prod-after
  vmesh diff --git-repo . --from origin/main --to HEAD --git-path mesh
  vmesh diff --exit-code --from HEAD~1 --to HEAD --git-path mesh
  vmesh diff --from main --to my-branch --server http://127.0.0.1:15014`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed, err := o.run(cmd)
			switch {
			case !o.exitCode && !o.strict:
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
	f.BoolVar(&o.exitCode, "exit-code", false, "exit 1 when some proxy's config changes or the change brings a config error, 2 when the versions cannot be compared (as git diff --exit-code)")
	f.BoolVar(&o.strict, "strict", false, "with --exit-code (implied), exit 1 on a warning the change brings too")
	return cmd
}

// diffOptions are vmesh diff's flags.
type diffOptions struct {
	dirs                                            []string
	gitRepo, gitPath, from, to, proxiesFile, server string
	asJSON, exitCode, strict                        bool
	output                                          string
}

// run prints the diff and reports whether the gate fails: some proxy's
// config changes, the change brings a config error, or, under --strict, a
// warning.
func (o *diffOptions) run(cmd *cobra.Command) (bool, error) {
	var before, after filestore.Loaded
	var err error
	switch {
	case len(o.dirs) == 2:
		if before, err = filestore.Load(o.dirs[0]); err != nil {
			return false, err
		}
		if after, err = filestore.Load(o.dirs[1]); err != nil {
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
		if before, err = checkGit(cmd, o.gitRepo, o.from, o.gitPath); err != nil {
			return false, err
		}
		if after, err = checkGit(cmd, o.gitRepo, o.to, o.gitPath); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("give --dir twice, or --to (and --from)")
	}
	if err := cleanBefore(before, o.describe(0, o.from)); err != nil {
		return false, err
	}
	if len(after.Errors) > 0 {
		// A new config error: there is no config after the change to diff
		// against, and the gate fails.
		w := cmd.OutOrStdout()
		if o.output != "table" || o.asJSON {
			w = cmd.ErrOrStderr()
		}
		fmt.Fprintf(w, "%s would be rejected: %d config error(s) the change brings:\n", o.describe(1, o.to), len(after.Errors))
		for _, e := range after.Errors {
			fmt.Fprintln(w, e.Error())
		}
		return true, nil
	}
	told, source, err := o.targets()
	if err != nil {
		return false, err
	}
	res, err := configdiff.DiffTargets(before.Objects, after.Objects, told, true)
	if err != nil {
		return false, err
	}
	diffs := res.Diffs
	var registry []*store.Object
	if o.server != "" {
		if registry, err = registryObjects(cmd, o.server); err != nil {
			return false, err
		}
	}
	warns, added, err := newWarnings(before, after, registry, o.server != "")
	if err != nil {
		return false, err
	}
	fail := configdiff.AnyChange(diffs) || o.strict && added > 0
	note := coverageNote(res, source)
	if o.asJSON {
		o.output = "json"
	}
	if o.output != "table" {
		// The JSON (or YAML) stays the list of proxy diffs; the note and
		// the warnings go to stderr.
		if note != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), note)
		}
		for _, w := range warns {
			fmt.Fprintln(cmd.ErrOrStderr(), w)
		}
		if diffs == nil {
			diffs = []configdiff.ProxyDiff{}
		}
		return fail, writeOutput(cmd.OutOrStdout(), o.output, diffs, nil)
	}
	if note != "" {
		fmt.Fprintln(cmd.OutOrStdout(), note)
	}
	fmt.Fprint(cmd.OutOrStdout(), configdiff.Format(diffs))
	if len(warns) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "\nwarnings after the change (%d; + new with it):\n", len(warns))
		for _, w := range warns {
			fmt.Fprintln(cmd.OutOrStdout(), w)
		}
	}
	if o.strict && added > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "--strict: the change brings %d new warning(s)\n", added)
	}
	return fail, nil
}

// describe names the version before (0) or after (1) the change.
func (o *diffOptions) describe(i int, rev string) string {
	if len(o.dirs) == 2 {
		return o.dirs[i]
	}
	return rev
}

// cleanBefore fails when the config before the change has errors: the diff
// would not show what proxies get now.
func cleanBefore(l filestore.Loaded, name string) error {
	if len(l.Errors) == 0 {
		return nil
	}
	if l.Commit != "" {
		return fmt.Errorf("%s (%.12s) would be rejected: %s", name, l.Commit, l.Errors[0].Error())
	}
	return fmt.Errorf("%s has %d config error(s), first: %s", name, len(l.Errors), l.Errors[0].Error())
}

// coverageNote says when the diff stood in for proxies it was not given.
func coverageNote(res configdiff.Result, source string) string {
	switch {
	case res.Told == 0 && source == "":
		if res.Uncovered == 0 {
			return ""
		}
		return fmt.Sprintf("note: no proxies given (--server, --proxies): computed against one representative proxy of each of the %d group(s) the change touches", res.Uncovered)
	case res.Told == 0:
		return fmt.Sprintf("note: no proxies %s: computed against one representative proxy of each of the %d group(s) the change touches", source, res.Uncovered)
	case res.Uncovered > 0:
		return fmt.Sprintf("note: %d group(s) the change touches have no proxy among the %d %s: each is shown by a representative proxy", res.Uncovered, res.Told, source)
	}
	return ""
}

// newWarnings returns the warnings of the config after the change (the
// files' own and the analysis, with the registry objects of --server when
// complete), each prefixed "+ " when the config before did not have it,
// else "  ".
func newWarnings(before, after filestore.Loaded, registry []*store.Object, complete bool) (_ []string, added int, _ error) {
	had := map[string]bool{}
	old, err := warningsOf(before, registry, complete)
	if err != nil {
		return nil, 0, err
	}
	for _, w := range old {
		had[warningText(w)] = true
	}
	now, err := warningsOf(after, registry, complete)
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for _, w := range now {
		if w.Severity != store.SeverityWarning {
			continue // infos: vmesh analyze
		}
		mark := "  "
		if !had[warningText(w)] {
			mark = "+ "
			added++
		}
		out = append(out, mark+w.Error())
	}
	return out, added, nil
}

// warningText is a warning without where it is (a line or commit that
// moved does not make it new).
func warningText(w store.ConfigError) string {
	w.Line, w.Commit = 0, ""
	return w.Error()
}

// targets are the proxies the diff is told about, and where they come
// from ("" when none is given).
func (o *diffOptions) targets() ([]configdiff.Target, string, error) {
	switch {
	case o.server != "":
		told, err := connectedTargets(o.server)
		return told, "connected to " + o.server, err
	case o.proxiesFile != "":
		data, err := os.ReadFile(o.proxiesFile)
		if err != nil {
			return nil, "", err
		}
		var ps []*xds.Proxy
		if err := json.Unmarshal(data, &ps); err != nil {
			return nil, "", fmt.Errorf("%s: %w", o.proxiesFile, err)
		}
		told := make([]configdiff.Target, len(ps))
		for i, p := range ps {
			told[i] = configdiff.Target{Proxy: p}
		}
		return told, "in " + o.proxiesFile, nil
	}
	return nil, "", nil
}
