package main

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

func newValidateCmd() *cobra.Command {
	var in configInput
	var strict bool
	var output string
	cmd := &cobra.Command{
		Use:   "validate [PATH...]",
		Short: "Validate Istio YAML files, directories or a git ref, like istioctl validate",
		Long: `Validate decodes and checks every object and prints each problem as
  file:line: kind/namespace/name: field: message
then each warning (config that applies but is not, or not fully, enforced, and
the warnings vmesh analyze finds) as
  file:line: kind/namespace/name: field: warning CODE: message
It exits 1 if there is any error, and 0 otherwise; with --strict a warning
exits 1 too. Infos (a host no file defines, which a registry may; a field
proxyless gRPC clients ignore) are counted, and shown by vmesh analyze. With
--git-ref it validates the tree of that ref (in --git-repo, default the current
directory; PATH is then an optional sub-folder). The codes are listed in the
README. -o json|yaml prints {objects, errors, warnings} instead, infos among
the warnings with their severity; the exit code is the same.`,
		Example: `  vmesh validate examples/quickstart
  vmesh validate --strict --git-ref origin/main mesh/
  vmesh validate -o json mesh/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, warns, err := in.load(cmd, args, "validating")
			if err != nil {
				return err
			}
			if err := writeReport(cmd, output, l, warns, false, nil); err != nil {
				return err
			}
			nw := countWarnings(warns)
			if infos := len(warns) - nw; infos > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d info(s): vmesh analyze shows them\n", infos)
			}
			switch {
			case len(l.Errors) > 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "%d problem(s), %d warning(s), %d valid object(s)\n", len(l.Errors), nw, len(l.Objects))
				return exitError{code: 1}
			case nw > 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "%d object(s) valid, %d warning(s)\n", len(l.Objects), nw)
				if strict {
					return exitError{code: 1}
				}
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d object(s) valid\n", len(l.Objects))
			return nil
		},
	}
	in.flags(cmd)
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 on a warning too")
	outputFlag(cmd, &output)
	return cmd
}

// configReport is validate's and analyze's -o json|yaml output.
type configReport struct {
	Objects  int                 `json:"objects"`
	Errors   []store.ConfigError `json:"errors"`
	Warnings []store.ConfigError `json:"warnings"`
	// RouteStatus is the Gateway API routes' status (vmesh analyze).
	RouteStatus []gatewayapi.RouteStatus `json:"routeStatus,omitempty"`
}

// writeReport prints a loaded config's errors and warnings: as lines
// (table; infos only when infos is set), or as a configReport.
func writeReport(cmd *cobra.Command, output string, l filestore.Loaded, warns []store.ConfigError, infos bool, status []gatewayapi.RouteStatus) error {
	r := configReport{Objects: len(l.Objects), Errors: l.Errors, Warnings: warns, RouteStatus: status}
	if r.Errors == nil {
		r.Errors = []store.ConfigError{}
	}
	if r.Warnings == nil {
		r.Warnings = []store.ConfigError{}
	}
	return writeOutput(cmd.OutOrStdout(), output, r, func(tw *tabwriter.Writer) error {
		for _, e := range l.Errors {
			fmt.Fprintln(tw, e.Error())
		}
		printWarnings(tw, warns, infos)
		for _, st := range status {
			fmt.Fprintln(tw, st.String())
		}
		return nil
	})
}

// configInput is the config a command reads: files and directories, or a
// git ref's tree; and, with server, the registry objects of a running
// control plane to check them against.
type configInput struct{ gitRef, gitRepo, server string }

func (in *configInput) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&in.gitRef, "git-ref", "", "read this git ref instead of files")
	cmd.Flags().StringVar(&in.gitRepo, "git-repo", ".", "repository for --git-ref")
	cmd.Flags().StringVar(&in.server, "server", "", "HTTP address of a running vmesh: check hosts against its registries' services too (its /debug/config)")
	gitVerboseFlag(cmd)
}

// gitVerboseFlag registers -v/--verbose, which shows git's fetch progress
// for --git-ref; without it only git's warnings and errors are printed.
func gitVerboseFlag(cmd *cobra.Command) {
	cmd.Flags().BoolP("verbose", "v", false, "show git's fetch progress (--git-ref, --from/--to)")
}

// load decodes the input as one source and returns it with its warnings:
// the files' own and the analysis of the whole set: without registries (a
// host no file defines is an info), or with those of --server.
func (in *configInput) load(cmd *cobra.Command, args []string, verb string) (filestore.Loaded, []store.ConfigError, error) {
	var l filestore.Loaded
	if in.gitRef != "" {
		if len(args) > 1 {
			return l, nil, fmt.Errorf("with --git-ref give at most one sub-folder")
		}
		sub := ""
		if len(args) == 1 {
			sub = args[0]
		}
		var err error
		if l, err = checkGit(cmd, in.gitRepo, in.gitRef, sub); err != nil {
			return l, nil, err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s %s at %.12s\n", verb, in.gitRef, l.Commit)
	} else {
		if len(args) == 0 {
			return l, nil, fmt.Errorf("give at least one file or directory, or --git-ref")
		}
		for _, p := range args {
			pl, err := filestore.Load(p)
			if err != nil {
				return l, nil, err
			}
			l.Objects = append(l.Objects, pl.Objects...)
			l.Errors = append(l.Errors, pl.Errors...)
			l.Warnings = append(l.Warnings, pl.Warnings...)
		}
	}
	var remote []*store.Object
	if in.server != "" {
		var err error
		if remote, err = registryObjects(cmd, in.server); err != nil {
			return l, nil, err
		}
	}
	warns, err := warningsOf(l, remote, in.server != "")
	return l, warns, err
}

// registryObjects reads the objects a running control plane has from its
// sources other than files and git (registries, registrations): what files
// reference and do not define.
func registryObjects(cmd *cobra.Command, server string) ([]*store.Object, error) {
	var dc filestore.DebugConfig
	if err := getJSON(server, "/debug/config", &dc); err != nil {
		return nil, err
	}
	objs, err := dc.DecodeObjects(func(_, class string) bool { return class != store.ClassConfig.String() })
	if err != nil {
		return nil, fmt.Errorf("--server %s: %w", server, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "checking against %d registry object(s) of %s\n", len(objs), server)
	return objs, nil
}

// warningsOf returns a loaded config's warnings, the files' own and the
// analysis, sorted by file and line: the analysis of the files alone, or,
// when complete, with the registry objects of a control plane.
func warningsOf(l filestore.Loaded, registry []*store.Object, complete bool) ([]store.ConfigError, error) {
	if !complete {
		registry = nil
	}
	found, err := analysis.Objects(l.Objects, registry, complete)
	if err != nil {
		return nil, err
	}
	found = analysis.HoldBack(found, brokenFiles(l))
	warns := append(slices.Clip(l.Warnings), found...)
	slices.SortStableFunc(warns, func(a, b store.ConfigError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return warns, nil
}

// brokenFiles lists the files with errors that define no object (they
// failed to decode), for analysis.HoldBack.
func brokenFiles(l filestore.Loaded) []string {
	defined := map[string]bool{}
	for _, o := range l.Objects {
		defined[o.Origin.File] = true
	}
	var out []string
	for _, e := range l.Errors {
		if e.File != "" && !defined[e.File] && !slices.Contains(out, e.File) {
			out = append(out, e.File)
		}
	}
	slices.Sort(out)
	return out
}

// checkGit reads a git ref's tree (sub-folder sub) without a Store.
func checkGit(cmd *cobra.Command, repo, ref, sub string) (filestore.Loaded, error) {
	work, err := os.MkdirTemp("", "vmesh-git-")
	if err != nil {
		return filestore.Loaded{}, err
	}
	defer os.RemoveAll(work)
	level := slog.LevelWarn
	if v, _ := cmd.Flags().GetBool("verbose"); v {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo, Ref: ref, Path: sub, WorkDir: filepath.Join(work, "git")}, nil, logger)
	if err != nil {
		return filestore.Loaded{}, err
	}
	return src.Check(cmd.Context())
}

// printWarnings prints warnings, one a line, and the infos too when infos.
func printWarnings(w io.Writer, warns []store.ConfigError, infos bool) {
	for _, e := range warns {
		if infos || e.Severity == store.SeverityWarning {
			fmt.Fprintln(w, e.Error())
		}
	}
}

// countWarnings counts the warnings (not the infos).
func countWarnings(warns []store.ConfigError) int {
	n := 0
	for _, w := range warns {
		if w.Severity == store.SeverityWarning {
			n++
		}
	}
	return n
}
