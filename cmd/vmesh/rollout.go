package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/xds"
)

// newRolloutCmd is `vmesh rollout status|promote|abort`: the staged
// rollout of git commits (git.rollout in vmesh.yaml) on a replica.
func newRolloutCmd() *cobra.Command {
	var server, output string
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show or steer the staged rollout of git commits (git.rollout in vmesh.yaml)",
		Long: `A commit goes first to the canary proxies (git.rollout.canary: a label
selector or a percentage), and to the rest after the bake time
(git.rollout.bake) when no canary rejected it (NACK) and no endpoint turned
unhealthy; else it is held and the canaries return to the last good commit.

  vmesh rollout status    the phase (idle, baking, held, pinned), the commits, the canaries
  vmesh rollout promote   send the baking or held commit to every proxy now
  vmesh rollout abort     hold the baking commit: the canaries return to the last good one`,
	}
	cmd.PersistentFlags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica")
	show := func(w io.Writer, st *xds.RolloutStatus) error {
		return writeOutput(w, output, st, func(tw *tabwriter.Writer) error {
			return rolloutTable(tw, st)
		})
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the rollout's phase, commits and canaries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st xds.RolloutStatus
			if err := getJSON(server, "/debug/rollout", &st); err != nil {
				return err
			}
			return show(cmd.OutOrStdout(), &st)
		},
	}
	outputFlag(status, &output)
	act := func(name, short string) *cobra.Command {
		return &cobra.Command{
			Use:   name,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				var st xds.RolloutStatus
				if err := postJSON(server, "/debug/rollout/"+name, &st); err != nil {
					return fmt.Errorf("rollout %s: %w", name, err)
				}
				return show(cmd.OutOrStdout(), &st)
			},
		}
	}
	cmd.AddCommand(status,
		act("promote", "Send the baking or held commit to every proxy now"),
		act("abort", "Hold the baking commit: the canaries return to the last good commit"))
	return cmd
}

// newPinCmd is `vmesh pin REV`: every proxy served commit REV.
func newPinCmd() *cobra.Command {
	var server, output string
	cmd := &cobra.Command{
		Use:   "pin REV",
		Short: "Serve git commit REV to every proxy, whatever the branch says, until vmesh unpin (an emergency brake)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st xds.RolloutStatus
			if err := postJSON(server, "/debug/rollout/pin?rev="+url.QueryEscape(args[0]), &st); err != nil {
				return fmt.Errorf("pin %s: %w", args[0], err)
			}
			return writeOutput(cmd.OutOrStdout(), output, &st, func(tw *tabwriter.Writer) error { return rolloutTable(tw, &st) })
		},
	}
	cmd.Flags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica")
	outputFlag(cmd, &output)
	return cmd
}

// newUnpinCmd is `vmesh unpin`: the branch's latest commit goes through
// the rollout again.
func newUnpinCmd() *cobra.Command {
	var server, output string
	cmd := &cobra.Command{
		Use:   "unpin",
		Short: "End vmesh pin: the branch's latest commit goes through the rollout (canaries first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st xds.RolloutStatus
			if err := postJSON(server, "/debug/rollout/unpin", &st); err != nil {
				return fmt.Errorf("unpin: %w", err)
			}
			return writeOutput(cmd.OutOrStdout(), output, &st, func(tw *tabwriter.Writer) error { return rolloutTable(tw, &st) })
		},
	}
	cmd.Flags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica")
	outputFlag(cmd, &output)
	return cmd
}

// rolloutTable prints a rollout's state.
func rolloutTable(tw *tabwriter.Writer, st *xds.RolloutStatus) error {
	canaries := st.Selector
	if canaries == "" {
		canaries = fmt.Sprintf("%d%% of the proxies", st.Percent)
	}
	fmt.Fprintf(tw, "PHASE\t%s\n", strings.ToUpper(st.Phase))
	fmt.Fprintf(tw, "STATE\t%s\n", st.Summary())
	fmt.Fprintf(tw, "GOOD\t%s\n", orDash(st.Good))
	fmt.Fprintf(tw, "CANDIDATE\t%s\n", orDash(st.Candidate))
	if st.Reason != "" {
		fmt.Fprintf(tw, "REASON\t%s\n", st.Reason)
	}
	if len(st.Rejected) > 0 {
		fmt.Fprintf(tw, "REJECTED BY\t%s\n", strings.Join(st.Rejected, ", "))
	}
	fmt.Fprintf(tw, "CANARIES\t%s (bake %s); on the candidate: %s\n", canaries, st.Bake, orDash(strings.Join(st.Canaries, ", ")))
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
