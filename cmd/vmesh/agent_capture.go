package main

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/capture"
	"github.com/vmesh/vmesh/agents/envoy"
)

// Capture modes of `vmesh agent --capture`.
const (
	captureAuto = "auto" // on when the agent runs Envoy
	captureOn   = "on"
	captureOff  = "off"
)

// captureFlags are the traffic-capture settings of `vmesh agent`, named as
// Istio's traffic.sidecar.istio.io annotations, defaulting to the
// istio-iptables environment variables of an Istio VM's cluster.env when
// those are set.
type captureFlags struct {
	capture, mode                                  string
	includeOutbound, excludeOutbound               string
	includeInbound, excludeInbound, excludeOutPort string
	uid, gid                                       uint32
	// skipped says why --capture auto captures nothing though Envoy runs.
	skipped error
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func (c *captureFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.capture, "capture", captureAuto, "traffic capture: auto (when Envoy runs), on, off")
	f.StringVar(&c.mode, "capture-mode", capture.ModeAuto, "capture backend: auto (nftables when nft works, else iptables), nftables, iptables")
	f.StringVar(&c.includeOutbound, "include-outbound-ip-ranges", envOr("ISTIO_SERVICE_CIDR", "*"), `outbound CIDRs captured, comma-separated; "*" all, "" none (includeOutboundIPRanges, $ISTIO_SERVICE_CIDR)`)
	f.StringVar(&c.excludeOutbound, "exclude-outbound-ip-ranges", envOr("ISTIO_SERVICE_EXCLUDE_CIDR", ""), "outbound CIDRs never captured (excludeOutboundIPRanges, $ISTIO_SERVICE_EXCLUDE_CIDR); the control plane's address always is")
	f.StringVar(&c.includeInbound, "include-inbound-ports", envOr("ISTIO_INBOUND_PORTS", "*"), `inbound ports captured; "*" all, "" none (includeInboundPorts, $ISTIO_INBOUND_PORTS)`)
	f.StringVar(&c.excludeInbound, "exclude-inbound-ports", envOr("ISTIO_LOCAL_EXCLUDE_PORTS", ""), "inbound ports never captured, besides 15020, 15021, 15090 (excludeInboundPorts, $ISTIO_LOCAL_EXCLUDE_PORTS)")
	f.StringVar(&c.excludeOutPort, "exclude-outbound-ports", envOr("ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE", ""), "outbound ports never captured (excludeOutboundPorts, $ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE)")
	f.Uint32Var(&c.uid, "proxy-uid", capture.DefaultProxyUID, "UID Envoy runs as; its traffic is never captured")
	f.Uint32Var(&c.gid, "proxy-gid", capture.DefaultProxyGID, "GID Envoy runs as; its traffic is never captured")
}

// apply sets cfg.Capture from the flags.
func (c *captureFlags) apply(cfg *agent.Config) error {
	switch c.capture {
	case captureOff:
		return nil
	case captureAuto:
		if cfg.DisableEnvoy {
			return nil
		}
		if bin, err := envoy.Find(cfg.EnvoyBinary); err != nil || bin == "" {
			return nil // no Envoy: nothing to capture to
		}
		if err := capture.Permitted(true); err != nil {
			c.skipped = err // Run logs it; --capture on makes it an error
			return nil
		}
	case captureOn:
	default:
		return fmt.Errorf("--capture %q: want auto, on or off", c.capture)
	}
	cc := capture.Defaults()
	cc.Mode = c.mode
	cc.ProxyUIDs, cc.ProxyGIDs = []uint32{c.uid}, []uint32{c.gid}
	var err error
	if cc.IncludeOutboundIPRanges, err = capture.ParsePrefixes(c.includeOutbound); err != nil {
		return fmt.Errorf("--include-outbound-ip-ranges: %w", err)
	}
	if cc.ExcludeOutboundIPRanges, err = capture.ParsePrefixes(c.excludeOutbound); err != nil {
		return fmt.Errorf("--exclude-outbound-ip-ranges: %w", err)
	}
	if cc.ExcludeOutboundIPRanges == nil { // "*": exclude everything = capture nothing
		cc.IncludeOutboundIPRanges = []netip.Prefix{}
		cc.ExcludeOutboundIPRanges = []netip.Prefix{}
	}
	if cc.IncludeInboundPorts, err = capture.ParsePorts(c.includeInbound); err != nil {
		return fmt.Errorf("--include-inbound-ports: %w", err)
	}
	if cc.ExcludeInboundPorts, err = capture.ParsePorts(c.excludeInbound); err != nil {
		return fmt.Errorf("--exclude-inbound-ports: %w", err)
	}
	if cc.ExcludeOutboundPorts, err = capture.ParsePorts(c.excludeOutPort); err != nil {
		return fmt.Errorf("--exclude-outbound-ports: %w", err)
	}
	if err := cc.Validate(); err != nil {
		return err
	}
	cfg.Capture = &cc
	return nil
}

func newAgentCleanupCmd() *cobra.Command {
	var logs logFlags
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the agent's traffic capture rules: take the VM out of the mesh",
		Long: `cleanup removes every nftables table and iptables chain of vmesh's agent
(table inet vmesh; the VMESH_* chains of iptables and ip6tables and the
jumps to them). The agent leaves them in place when it stops, restarts or
crashes, so that captured traffic fails while it is down rather than
reaching the workload without mTLS and policy. Run it, once the agent is
stopped, to take the VM out of the mesh: its traffic then flows directly
again. Removing the vmesh-agent package runs it. With nothing to remove
it does nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			if err := capture.Remove(cmd.Context(), logger); err != nil {
				return err
			}
			logger.Info("traffic capture rules removed")
			return nil
		},
	}
	logs.register(cmd)
	return cmd
}
