package main

import (
	"context"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// caDataDir is where the CA lives in a control plane's data dir.
func caDataDir(dataDir string) string { return filepath.Join(dataDir, "ca") }

func newCACmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ca", Short: "The control plane's CA: revocations"}
	cmd.AddCommand(newCARevokeCmd(), newCARevocationsCmd())
	return cmd
}

// dialState connects to a --state backend for the CLI, with the replicas'
// state key: --state-key-file, else derived from --cacerts-dir's issuing
// key (as the replicas derive it).
func dialState(cmd *cobra.Command, flag, keyFile, cacertsDir string) (*sharedstate.Client, error) {
	spec, err := sharedstate.ParseFlag(flag)
	if err != nil {
		return nil, err
	}
	var key sharedstate.Key
	switch {
	case keyFile != "":
		key, err = sharedstate.LoadKeyFile(keyFile)
	case cacertsDir != "":
		key, err = sharedstate.KeyFromCACerts(cacertsDir)
	}
	if err != nil {
		return nil, err
	}
	return sharedstate.Dial(spec, key, cliLogger(cmd))
}

func newCARevokeCmd() *cobra.Command {
	var dataDir, cacertsDir, state, stateKeyFile, trustDomain string
	var req ca.RevokeRequest
	cmd := &cobra.Command{
		Use:   "revoke (--identity SPIFFE-ID | --serial HEX | --token ID)",
		Short: "Revoke a certificate, an identity or a bootstrap token",
		Long: `revoke adds to the revocation list in the control plane's data dir, which
the running control plane re-reads when it changes:

  --identity spiffe://TD/ns/NS/sa/SA  every certificate and bootstrap token issued
                                       for it so far (a lost or compromised VM:
                                       onboard it again with a new token); open xDS
                                       streams with such a certificate end
  --serial HEX                         one certificate (hex, as openssl prints it)
  --token ID                           one bootstrap token, by the ID
                                       "vmesh token create" prints

With --state consul=ADDR or zookeeper=ADDR[,ADDR] (the replicas' shared
state, vmesh serve --state), the revocation is written there instead, signed
with the replicas' state key (--state-key-file, or derived from the shared
--cacerts-dir as the replicas do), and every replica applies it to its CA
within seconds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" {
				rv, err := ca.RevocationFor(req, time.Now(), trustDomain)
				if err != nil {
					return err
				}
				client, err := dialState(cmd, state, stateKeyFile, cacertsDir)
				if err != nil {
					return err
				}
				defer client.Close()
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				defer cancel()
				if err := client.Revoke(ctx, rv); err != nil {
					return err
				}
			} else {
				cfg := ca.Config{DataDir: caDataDir(dataDir), CACertsDir: cacertsDir, NoCreate: true}
				if err := ca.Revoke(cfg, cliLogger(cmd), req); err != nil {
					return err
				}
			}
			what := "certificate " + req.Serial
			switch {
			case req.Identity != "":
				what = "identity " + req.Identity
			case req.Token != "":
				what = "token " + req.Token
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", what)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".vmesh-data", "the control plane's data dir (the CA lives in <data-dir>/ca)")
	f.StringVar(&cacertsDir, "cacerts-dir", "", "Istio plug-in cacerts directory, if the control plane uses one")
	f.StringVar(&req.Identity, "identity", "", "a SPIFFE ID: every certificate and token issued for it so far")
	f.StringVar(&req.Serial, "serial", "", "a certificate's serial number, hex")
	f.StringVar(&req.Token, "token", "", "a bootstrap token's ID")
	f.StringVar(&req.Reason, "reason", "", "why, kept in the list and named in refusals")
	f.StringVar(&state, "state", "", "revoke for every replica: their shared state, consul=ADDR or zookeeper=ADDR[,ADDR]")
	f.StringVar(&trustDomain, "trust-domain", "", "with --state: the mesh's trust domain, which an --identity must be of")
	f.StringVar(&stateKeyFile, "state-key-file", "", "with --state: the replicas' state key file (vmesh serve --state-key-file); default: derived from --cacerts-dir")
	cmd.MarkFlagsMutuallyExclusive("identity", "serial", "token")
	cmd.MarkFlagsOneRequired("identity", "serial", "token")
	return cmd
}

func newCARevocationsCmd() *cobra.Command {
	var dataDir, cacertsDir, output, state, stateKeyFile string
	cmd := &cobra.Command{
		Use:   "revocations",
		Short: "List the CA's revocation list (or, with --state, the replicas' shared one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []ca.Revocation
			var err error
			if state != "" {
				client, derr := dialState(cmd, state, stateKeyFile, cacertsDir)
				if derr != nil {
					return derr
				}
				defer client.Close()
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				defer cancel()
				var refused []sharedstate.UnreadableRecord
				list, refused, err = client.Revocations(ctx)
				for _, r := range refused {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: refused shared revocation %s: %s: %s\n", r.Key, r.Reason, r.Error)
				}
			} else {
				list, err = ca.Revocations(ca.Config{DataDir: caDataDir(dataDir), CACertsDir: cacertsDir, NoCreate: true}, cliLogger(cmd))
			}
			if err != nil {
				return err
			}
			if list == nil {
				list = []ca.Revocation{}
			}
			return writeOutput(cmd.OutOrStdout(), output, list, func(tw *tabwriter.Writer) error {
				fmt.Fprintln(tw, "REVOKED\tWHAT\tREVOKED AT\tUNTIL\tREASON")
				for _, r := range list {
					kind, v := "certificate", r.Serial
					switch {
					case r.Identity != "":
						kind, v = "identity", r.Identity
					case r.Token != "":
						kind, v = "token", r.Token
					}
					until := "-"
					if !r.NotAfter.IsZero() {
						until = r.NotAfter.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", kind, v, r.RevokedAt.UTC().Format(time.RFC3339), until, r.Reason)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".vmesh-data", "the control plane's data dir (the CA lives in <data-dir>/ca)")
	cmd.Flags().StringVar(&cacertsDir, "cacerts-dir", "", "Istio plug-in cacerts directory, if the control plane uses one")
	cmd.Flags().StringVar(&state, "state", "", "list the replicas' shared revocations: consul=ADDR or zookeeper=ADDR[,ADDR]")
	cmd.Flags().StringVar(&stateKeyFile, "state-key-file", "", "with --state: the replicas' state key file; default: derived from --cacerts-dir")
	outputFlag(cmd, &output)
	return cmd
}
