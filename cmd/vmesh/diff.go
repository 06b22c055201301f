package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/cmd/vmesh/internal/configdiff"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/xds"
)

func newDiffCmd() *cobra.Command {
	var dirs []string
	var gitRepo, gitPath, from, to, proxiesFile, server string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff (--dir A --dir B | --from REV --to REV)",
		Short: "Show which proxies' xDS config a change would alter, resource by resource",
		Long: `diff generates every proxy's xDS resources from two versions of the config
and prints, per proxy, the resources added, removed and changed, with a
field-level diff. It never touches a running control plane.

Proxies come from --server (the proxies connected to a running vmesh, read from
its /debug/syncz), from --proxies FILE (a JSON list of {id, kind, namespace,
labels, serviceAccount, ips}), or, by default, one proxyless gRPC client per
namespace of the config.`,
		Example: `  vmesh diff --dir prod-before --dir prod-after
  vmesh diff --git-repo . --from origin/main --to HEAD --git-path mesh
  vmesh diff --from main --to my-branch --server http://127.0.0.1:15014`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var before, after []*filestore.Object
			var err error
			switch {
			case len(dirs) == 2:
				if before, err = loadClean(dirs[0]); err != nil {
					return err
				}
				if after, err = loadClean(dirs[1]); err != nil {
					return err
				}
			case len(dirs) == 0 && to != "":
				if from == "" && server != "" {
					if from, err = servedCommit(server); err != nil {
						return err
					}
				}
				if from == "" {
					return fmt.Errorf("--from is required (or --server of a vmesh serving a git source)")
				}
				if before, err = loadGit(cmd, gitRepo, from, gitPath); err != nil {
					return err
				}
				if after, err = loadGit(cmd, gitRepo, to, gitPath); err != nil {
					return err
				}
			default:
				return fmt.Errorf("give --dir twice, or --to (and --from)")
			}
			proxies, err := diffProxies(server, proxiesFile, before, after)
			if err != nil {
				return err
			}
			diffs, err := configdiff.Diff(before, after, proxies)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(diffs)
			}
			fmt.Fprint(cmd.OutOrStdout(), configdiff.Format(diffs))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&dirs, "dir", nil, "a config directory (give two: before, after)")
	f.StringVar(&gitRepo, "git-repo", ".", "git repository for --from/--to")
	f.StringVar(&gitPath, "git-path", "", "sub-folder of the repository")
	f.StringVar(&from, "from", "", "git revision before the change (default: the commit --server serves)")
	f.StringVar(&to, "to", "", "git revision after the change")
	f.StringVar(&proxiesFile, "proxies", "", "JSON file listing the proxies to compute")
	f.StringVar(&server, "server", "", "HTTP address of a running vmesh whose connected proxies to use")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// loadClean loads a directory and fails on any config error: a diff of
// config that would be rejected would not show what proxies get.
func loadClean(dir string) ([]*filestore.Object, error) {
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s has %d config error(s), first: %s", dir, len(errs), errs[0].Error())
	}
	return objs, nil
}

func loadGit(cmd *cobra.Command, repo, ref, sub string) ([]*filestore.Object, error) {
	work, err := os.MkdirTemp("", "vmesh-diff-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo, Ref: ref, Path: sub, WorkDir: filepath.Join(work, "git")}, nil, nil)
	if err != nil {
		return nil, err
	}
	commit, objs, errs, err := src.Check(cmd.Context())
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s (%.12s) would be rejected: %s", ref, commit, errs[0].Error())
	}
	return objs, nil
}

// diffProxies picks the proxies to compute for.
func diffProxies(server, file string, sets ...[]*filestore.Object) ([]*xds.Proxy, error) {
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
