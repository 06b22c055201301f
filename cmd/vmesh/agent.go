package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/dnsproxy"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/internal/buildinfo"
)

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var probeFile, ips, certFileDirs string
	var logs logFlags
	var cf captureFlags
	cmd := &cobra.Command{
		Use:   "agent --bundle DIR",
		Short: "Run the per-VM agent: certificates, SDS, bootstraps, Envoy, health, registration",
		Long: `agent joins this VM to the mesh with the bundle written by "vmesh vm bundle":
it gets and rotates the workload certificate, writes the files and the xDS
bootstrap proxyless gRPC applications need (GRPC_XDS_BOOTSTRAP=<out>/grpc-bootstrap.json),
serves SDS and proxies xDS for Envoy on Unix sockets, runs Envoy when one is
installed, probes the workload and reports its health. With a WorkloadGroup
in the bundle the control plane registers the VM as a WorkloadEntry while
the agent itself is connected (applications' streams never register it),
and serves the group to the agent: its readiness probe is the one the
agent runs, following changes (--probe overrides it). A VM with a
WorkloadEntry of its own in the config (annotated
proxy.istio.io/health-checks-enabled: "true") names it with
--workload-entry: the agent's health reports then decide whether it is an
endpoint, as Istio's WORKLOAD_ENTRY does.

Exec probes (a WorkloadGroup's probe.exec) run only where this VM allows
them: --exec-probe-user NAME names the unprivileged local account they run
as (not root, not UID 0), without capabilities, supplementary groups or the
agent's environment, in /; their output stays in the agent's log. Without
it an exec probe is not run and the VM reports not ready: "exec probes are
disabled on this VM".

On a VM with Envoy it captures the VM's traffic as istio-iptables does
(nftables, else iptables): outbound TCP to 15001, inbound to 15006, DNS to
the agent's DNS proxy on 127.0.0.1:15053, which answers the mesh's hosts
from the control plane's name table and forwards the rest to the resolvers
of /etc/resolv.conf. The rules stay when the agent stops, restarts or
crashes: meanwhile captured traffic fails (inbound connections are refused
on 15006, the VM's DNS goes unanswered) instead of bypassing mTLS and
policy, and the next start replaces them in place. "vmesh agent cleanup"
removes them, taking the VM out of the mesh (removing the package runs
it). Port 15020 (loopback) serves /healthz/ready, /stats/prometheus and
/debug/ndsz.

A control plane that refuses the VM for good (a revoked identity, found at
the latest when a renewal of the certificate is refused; a token for
another trust domain; an unknown WorkloadGroup) makes the agent exit 78
(EX_CONFIG), which its systemd unit does not restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if probeFile != "" {
				data, err := os.ReadFile(probeFile)
				if err != nil {
					return err
				}
				p, err := health.ParseProbe(data)
				if err != nil {
					return fmt.Errorf("%s: %w", probeFile, err)
				}
				cfg.Probe = &p
			}
			if certFileDirs == "-" {
				certFileDirs = cfg.CredentialsDir
			}
			if certFileDirs != "" {
				cfg.CertFileDirs = strings.Split(certFileDirs, ",")
			}
			if ips != "" {
				cfg.IPs = strings.Split(ips, ",")
			}
			if cfg.Gateway && cf.capture == captureOn {
				return errors.New("--gateway: a gateway's traffic is not captured (its listeners take it): drop --capture on")
			}
			if err := cf.apply(&cfg); err != nil {
				return err
			}
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			bi := buildinfo.Get()
			logger.Info("vmesh version", "version", bi.Version, "revision", bi.Revision, "dirty", bi.Dirty, "go", bi.GoVersion)
			if cf.skipped != nil {
				logger.Warn("Envoy runs but traffic is not captured (--capture auto)", "reason", cf.skipped)
			}
			return agent.Run(cmd.Context(), cfg, logger, prometheus.NewRegistry())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.BundleDir, "bundle", "", "onboarding bundle directory (from vmesh vm bundle)")
	f.StringArrayVar(&cfg.DiscoveryAddresses, "discovery-address", nil, "a control-plane replica's secure port, host:port (repeatable, tried in order; default: the bundle's discovery and failover addresses)")
	f.StringVar(&cfg.OutDir, "out", agent.DefaultOutDir, "where certificates and bootstrap files are written")
	f.StringVar(&cfg.SocketDir, "sockets", agent.DefaultSocketDir, "where xds.sock and sds.sock are served")
	f.StringVar(&cfg.WorkloadName, "workload-name", "", "workload name (default: the host name)")
	f.StringVar(&cfg.WorkloadEntry, "workload-entry", "", "the config-defined WorkloadEntry (health-checks-enabled) whose health this agent reports")
	f.StringVar(&ips, "ip", "", "the VM's IPs, comma-separated (default: the address that reaches the control plane)")
	f.DurationVar(&cfg.CertTTL, "cert-ttl", 0, "requested certificate lifetime (default: the CA's)")
	f.StringVar(&cfg.EnvoyBinary, "envoy", "", "Envoy binary (default: envoy on PATH, if any)")
	f.BoolVar(&cfg.DisableEnvoy, "no-envoy", false, "never run Envoy (proxyless-only VM)")
	f.BoolVar(&cfg.Gateway, "gateway", false, "this VM is a gateway (also when its bundle says gateway: true): Envoy in router mode serving the Gateways that select its labels, no traffic capture, readiness on 15021")
	f.StringVar(&cfg.CredentialsDir, "credentials-dir", agent.DefaultCredentialsDir, `file credentials for credentialName: one folder each with tls.crt, tls.key, ca.crt, served to Envoy over SDS and reloaded on change ("" = none)`)
	f.StringVar(&certFileDirs, "cert-file-dirs", "-", `directories, comma-separated, the agent may read a Gateway server's certificate files from (serverCertificate, privateKey, caCertificates; served to Envoy over SDS, reloaded on change); a file whose real path is in none of them is refused ("-" = the credentials directory, "" = none)`)
	f.StringVar(&probeFile, "probe", "", "a readiness probe as YAML (httpGet, tcpSocket, exec or grpc), overriding the one of the WorkloadGroup the control plane serves")
	f.StringVar(&cfg.ExecProbeUser, "exec-probe-user", "", "allow exec probes, run as this unprivileged local user (not root); without it an exec probe is not run and the VM reports not ready")
	f.StringVar(&cfg.DNSAddr, "dns-addr", dnsproxy.DefaultAddr, `DNS proxy address, UDP and TCP ("" = no DNS proxy)`)
	f.StringVar(&cfg.ResolvConf, "resolv-conf", dnsproxy.DefaultResolvConf, "resolver configuration whose nameservers get the non-mesh queries and whose search domains expand short names")
	f.StringVar(&cfg.StatusAddr, "status-addr", "127.0.0.1:15020", `agent HTTP port: /healthz/ready, /stats/prometheus, /debug/ndsz ("" = none)`)
	cf.register(cmd)
	logs.register(cmd)
	_ = cmd.MarkFlagRequired("bundle")
	cmd.AddCommand(newAgentCleanupCmd())
	return cmd
}
