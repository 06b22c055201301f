package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/bundle"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// caFlags are the flags that locate an existing CA (never create one) and
// the running control plane it serves.
type caFlags struct {
	dataDir, cacertsDir, trustDomain, server string
}

func (f *caFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dataDir, "data-dir", ".vmesh-data", "the control plane's data dir (the CA lives in <data-dir>/ca)")
	cmd.Flags().StringVar(&f.cacertsDir, "cacerts-dir", "", "Istio plug-in cacerts directory, if the control plane uses one")
	cmd.Flags().StringVar(&f.trustDomain, "trust-domain", "", "trust domain (default: the running control plane's)")
	cmd.Flags().StringVar(&f.server, "server", "127.0.0.1:15014", "HTTP address of the running control plane, which checks what is minted")
}

func (f *caFlags) config() ca.Config {
	return ca.Config{DataDir: caDataDir(f.dataDir), CACertsDir: f.cacertsDir, TrustDomain: f.trustDomain, NoCreate: true}
}

// cliLogger is the CA's logger in a one-shot command: warnings and errors
// only, on stderr (its INFO lines are the server's business).
func cliLogger(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// check asks the running control plane whether a VM onboarded with req
// would join. Every problem is printed as one line naming the flag and the
// fix, and nothing is minted. With no --trust-domain, the control plane's
// is used.
func (f *caFlags) check(cmd *cobra.Command, req controlplane.OnboardingRequest) error {
	_, err := f.checked(cmd, req)
	return err
}

// checked is check that also returns the control plane's answer (its
// mesh config's defaults for VMs).
func (f *caFlags) checked(cmd *cobra.Command, req controlplane.OnboardingRequest) (controlplane.OnboardingCheck, error) {
	req.TrustDomain = f.trustDomain
	var got controlplane.OnboardingCheck
	if err := getJSON(f.server, "/debug/onboarding?"+req.Query().Encode(), &got); err != nil {
		return got, fmt.Errorf("cannot check against the control plane (start vmesh serve, or pass --server with its HTTP address): %w", err)
	}
	for _, p := range got.Problems {
		fmt.Fprintf(cmd.ErrOrStderr(), "vmesh: %s: %s; fix: %s\n", p.Flag, p.Message, p.Fix)
	}
	if len(got.Problems) > 0 {
		return got, exitError{code: 1}
	}
	f.trustDomain = got.TrustDomain
	return got, nil
}

// defaultDiscoveryAddress is `vmesh vm bundle`'s discovery address when
// neither --discovery-address nor the mesh config's
// defaultConfig.discoveryAddress names one.
const defaultDiscoveryAddress = "127.0.0.1:15012"

func newTokenCmd() *cobra.Command {
	var cf caFlags
	var req ca.TokenRequest
	create := &cobra.Command{
		Use:   "create",
		Short: "Mint a bootstrap token a VM exchanges for its first certificate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.check(cmd, controlplane.OnboardingRequest{Namespace: req.Namespace, ServiceAccount: req.ServiceAccount, WorkloadGroup: req.WorkloadGroup}); err != nil {
				return err
			}
			token, claims, err := ca.CreateToken(cf.config(), cliLogger(cmd), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s for %s/%s expires %s (revoke it with: vmesh ca revoke --token %s)\n", claims.ID, req.Namespace, req.ServiceAccount, claims.Expiry.UTC().Format(time.RFC3339), claims.ID)
			return nil
		},
	}
	cf.register(create)
	f := create.Flags()
	f.StringVar(&req.Namespace, "namespace", "default", "workload namespace")
	f.StringVar(&req.ServiceAccount, "service-account", "", "workload service account (required)")
	f.StringVar(&req.WorkloadGroup, "workload-group", "", "WorkloadGroup the VM joins (optional)")
	f.StringVar(&req.Audience, "audience", "", "token audience (default istio-ca)")
	f.DurationVar(&req.TTL, "ttl", 0, "token lifetime (default 1h)")
	_ = create.MarkFlagRequired("service-account")
	cmd := &cobra.Command{Use: "token", Short: "Bootstrap tokens for VMs"}
	cmd.AddCommand(create)
	return cmd
}

func newVMCmd() *cobra.Command {
	var cf caFlags
	var req ca.VMBundleRequest
	var out, labels string
	b := &cobra.Command{
		Use:   "bundle",
		Short: "Write everything one VM needs to join the mesh (root, token, discovery address, identity)",
		Long: `bundle writes root-cert.pem, a bootstrap token and bundle.yaml into --out:
copy the folder to the VM and run "vmesh agent --bundle DIR" there. Like
"istioctl x workload entry configure", with no Kubernetes behind it.

It runs on the control plane host and first asks the running control plane
(--server) whether the VM would join: the WorkloadGroup and a ServiceEntry
selecting it in the config being served, the group's service account, the
trust domain, and a discovery address the secure port listens on and its
certificate names. Each problem is one line naming the fix; nothing is
written then. The mesh config's defaultConfig gives the discovery address
(when --discovery-address is not given) and the proxyMetadata the bundle
carries to the agent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Labels, err = bundle.ParseLabels(labels); err != nil {
				return err
			}
			onboarding := controlplane.OnboardingRequest{Namespace: req.Namespace, ServiceAccount: req.ServiceAccount, WorkloadGroup: req.WorkloadGroup}
			if req.DiscoveryAddress == "" {
				// The mesh config's defaultConfig.discoveryAddress, else
				// the local secure port: ask first, then check it.
				got, err := cf.checked(cmd, onboarding)
				if err != nil {
					return err
				}
				req.DiscoveryAddress = cmp.Or(got.DiscoveryAddress, defaultDiscoveryAddress)
			}
			onboarding.DiscoveryAddress = req.DiscoveryAddress
			got, err := cf.checked(cmd, onboarding)
			if err != nil {
				return err
			}
			req.ProxyMetadata = got.ProxyMetadata
			bn, err := ca.WriteVMBundle(cf.config(), cliLogger(cmd), out, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s/%s via %s, token valid until %s\n", out, bn.Namespace, bn.ServiceAccount,
				bn.DiscoveryAddress, bn.TokenExpiry.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cf.register(b)
	f := b.Flags()
	f.StringVar(&out, "out", "vm-bundle", "output directory")
	f.StringVar(&req.Namespace, "namespace", "default", "workload namespace")
	f.StringVar(&req.ServiceAccount, "service-account", "", "workload service account (required)")
	f.StringVar(&req.WorkloadGroup, "workload-group", "", "WorkloadGroup the VM registers under (optional)")
	f.StringVar(&labels, "labels", "", "workload labels, k=v,k2=v2")
	f.StringVar(&req.DiscoveryAddress, "discovery-address", "", "host:port of the control plane's secure port (default: the mesh config's defaultConfig.discoveryAddress, else "+defaultDiscoveryAddress+")")
	f.StringArrayVar(&req.FailoverAddresses, "failover-address", nil, "host:port of another replica's secure port, tried in order when the discovery address does not answer (repeatable)")
	f.DurationVar(&req.TokenTTL, "token-ttl", 0, "bootstrap token lifetime (default 1h)")
	f.BoolVar(&req.Gateway, "gateway", false, "the VM is a gateway: its Envoy serves the Gateways whose selector matches --labels (router mode, no traffic capture, readiness on 15021)")
	_ = b.MarkFlagRequired("service-account")
	cmd := &cobra.Command{Use: "vm", Short: "VM onboarding"}
	cmd.AddCommand(b)
	return cmd
}
