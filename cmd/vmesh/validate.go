package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/filestore"
)

func newValidateCmd() *cobra.Command {
	var gitRef, gitRepo string
	cmd := &cobra.Command{
		Use:   "validate [PATH...]",
		Short: "Validate Istio YAML files, directories or a git ref, like istioctl validate",
		Long: `Validate decodes and checks every object and prints each problem as
  file:line: kind/namespace/name: field: message
It exits 1 if there is any problem and 0 otherwise. With --git-ref it validates
the tree of that ref (in --git-repo, default the current directory; PATH is then
an optional sub-folder).`,
		Example: `  vmesh validate examples/quickstart
  vmesh validate --git-ref origin/main mesh/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			var errs []filestore.ConfigError
			count := 0
			if gitRef != "" {
				if len(args) > 1 {
					return fmt.Errorf("with --git-ref give at most one sub-folder")
				}
				sub := ""
				if len(args) == 1 {
					sub = args[0]
				}
				work, err := os.MkdirTemp("", "vmesh-validate-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(work)
				src, err := filestore.NewGitSource(filestore.GitConfig{Repo: gitRepo, Ref: gitRef, Path: sub, WorkDir: filepath.Join(work, "git")}, nil, nil)
				if err != nil {
					return err
				}
				commit, objs, cerrs, err := src.Check(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "validating %s at %.12s\n", gitRef, commit)
				count, errs = len(objs), cerrs
			} else {
				if len(args) == 0 {
					return fmt.Errorf("give at least one file or directory, or --git-ref")
				}
				for _, p := range args {
					objs, perrs, err := filestore.LoadPath(p)
					if err != nil {
						return err
					}
					count += len(objs)
					errs = append(errs, perrs...)
				}
			}
			for _, e := range errs {
				fmt.Fprintln(out, e.Error())
			}
			if len(errs) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d problem(s), %d valid object(s)\n", len(errs), count)
				return exitError{code: 1}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d object(s) valid\n", count)
			return nil
		},
	}
	cmd.Flags().StringVar(&gitRef, "git-ref", "", "validate this git ref instead of files")
	cmd.Flags().StringVar(&gitRepo, "git-repo", ".", "repository for --git-ref")
	return cmd
}
