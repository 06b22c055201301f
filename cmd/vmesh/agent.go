package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/internal/buildinfo"
)

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var probeFile, ips string
	var logs logFlags
	cmd := &cobra.Command{
		Use:   "agent --bundle DIR",
		Short: "Run the per-VM agent: certificates, SDS, bootstraps, Envoy, health, registration",
		Long: `agent joins this VM to the mesh with the bundle written by "vmesh vm bundle":
it gets and rotates the workload certificate, writes the files and the xDS
bootstrap proxyless gRPC applications need (GRPC_XDS_BOOTSTRAP=<out>/grpc-bootstrap.json),
serves SDS and proxies xDS for Envoy on Unix sockets, runs Envoy when one is
installed, probes the workload and reports its health. With a WorkloadGroup
in the bundle the control plane registers the VM as a WorkloadEntry while
the agent is connected.`,
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
			if ips != "" {
				cfg.IPs = strings.Split(ips, ",")
			}
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			bi := buildinfo.Get()
			logger.Info("vmesh version", "version", bi.Version, "revision", bi.Revision, "dirty", bi.Dirty, "go", bi.GoVersion)
			return agent.Run(cmd.Context(), cfg, logger, prometheus.NewRegistry())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.BundleDir, "bundle", "", "onboarding bundle directory (from vmesh vm bundle)")
	f.StringVar(&cfg.OutDir, "out", agent.DefaultOutDir, "where certificates and bootstrap files are written")
	f.StringVar(&cfg.SocketDir, "sockets", agent.DefaultSocketDir, "where xds.sock and sds.sock are served")
	f.StringVar(&cfg.WorkloadName, "workload-name", "", "workload name (default: the host name)")
	f.StringVar(&ips, "ip", "", "the VM's IPs, comma-separated (default: the address that reaches the control plane)")
	f.DurationVar(&cfg.CertTTL, "cert-ttl", 0, "requested certificate lifetime (default: the CA's)")
	f.StringVar(&cfg.EnvoyBinary, "envoy", "", "Envoy binary (default: envoy on PATH, if any)")
	f.BoolVar(&cfg.DisableEnvoy, "no-envoy", false, "never run Envoy (proxyless-only VM)")
	f.StringVar(&probeFile, "probe", "", "the WorkloadGroup's readiness probe as YAML (httpGet, tcpSocket or exec)")
	logs.register(cmd)
	_ = cmd.MarkFlagRequired("bundle")
	return cmd
}
