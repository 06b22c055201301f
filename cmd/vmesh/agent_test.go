package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/internal/refusal"
)

// The agent's exit status says whether restarting can help, and the unit
// systemd runs it under agrees on the status that means "no".
func TestAgentExitStatus(t *testing.T) {
	permanent := &refusal.PermanentError{Part: "registration", Refusal: &refusal.Refusal{Code: codes.FailedPrecondition, Reason: "workload_group_not_found", Permanent: true}}
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("agent: %w", permanent), refusal.ExitPermanent},
		{errors.Join(permanent, errors.New("sds: closed")), refusal.ExitPermanent},
		{errors.New("agent: xDS socket: address in use"), 1},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	unit, err := os.ReadFile("../../tools/package/debian/vmesh-agent/vmesh-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nRestartPreventExitStatus=%d\n", refusal.ExitPermanent); !strings.Contains(string(unit), want) {
		t.Errorf("vmesh-agent.service lacks %q: systemd would restart a refused agent forever", strings.TrimSpace(want))
	}
}

// The capture flags take Istio's names and values, default to the
// istio-iptables variables of an Istio VM's cluster.env, and "auto" captures
// only when the agent runs Envoy.
func TestAgentCaptureFlags(t *testing.T) {
	t.Setenv("ISTIO_SERVICE_CIDR", "10.96.0.0/12")
	t.Setenv("ISTIO_LOCAL_EXCLUDE_PORTS", "22")
	cmd := newAgentCmd()
	if err := cmd.ParseFlags([]string{"--bundle", "b", "--capture", "on", "--exclude-outbound-ip-ranges", "10.1.0.0/16,10.2.0.9",
		"--include-inbound-ports", "8080,9090", "--exclude-outbound-ports", "3306", "--proxy-uid", "999"}); err != nil {
		t.Fatal(err)
	}
	var cfg agent.Config
	cf := captureFlagsOf(t, cmd)
	if err := cf.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	c := cfg.Capture
	if c == nil {
		t.Fatal("--capture on: no capture")
	}
	if fmt.Sprint(c.IncludeOutboundIPRanges) != "[10.96.0.0/12]" || fmt.Sprint(c.ExcludeOutboundIPRanges) != "[10.1.0.0/16 10.2.0.9/32]" ||
		fmt.Sprint(c.IncludeInboundPorts) != "[8080 9090]" || fmt.Sprint(c.ExcludeInboundPorts) != "[22]" ||
		fmt.Sprint(c.ExcludeOutboundPorts) != "[3306]" || fmt.Sprint(c.ProxyUIDs) != "[999]" || !c.CaptureDNS {
		t.Errorf("capture config %+v", *c)
	}
	// auto without Envoy: nothing to capture to.
	cmd = newAgentCmd()
	if err := cmd.ParseFlags([]string{"--bundle", "b", "--no-envoy"}); err != nil {
		t.Fatal(err)
	}
	cfg = agent.Config{DisableEnvoy: true}
	if err := captureFlagsOf(t, cmd).apply(&cfg); err != nil || cfg.Capture != nil {
		t.Errorf("auto without Envoy: %+v, %v", cfg.Capture, err)
	}
	cmd = newAgentCmd()
	_ = cmd.ParseFlags([]string{"--bundle", "b", "--capture", "sometimes"})
	if err := captureFlagsOf(t, cmd).apply(&agent.Config{}); err == nil {
		t.Error("--capture sometimes accepted")
	}
	if c, _, err := newAgentCmd().Find([]string{"cleanup"}); err != nil || c.Name() != "cleanup" {
		t.Errorf("vmesh agent cleanup: %v %v", c, err)
	}
}

// captureFlagsOf reads the capture flags back from a parsed agent command.
func captureFlagsOf(t *testing.T, cmd *cobra.Command) *captureFlags {
	t.Helper()
	f := cmd.Flags()
	get := func(n string) string {
		v, err := f.GetString(n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	uid, _ := f.GetUint32("proxy-uid")
	gid, _ := f.GetUint32("proxy-gid")
	return &captureFlags{capture: get("capture"), mode: get("capture-mode"), includeOutbound: get("include-outbound-ip-ranges"),
		excludeOutbound: get("exclude-outbound-ip-ranges"), includeInbound: get("include-inbound-ports"),
		excludeInbound: get("exclude-inbound-ports"), excludeOutPort: get("exclude-outbound-ports"), uid: uid, gid: gid}
}

// The packaged agent keeps its capture rules across stops and crashes (no
// ExecStopPost cleanup: traffic fails closed while it is down) and removes
// them when the package is removed, not on upgrade.
func TestAgentPackageKeepsCaptureUntilRemoval(t *testing.T) {
	dir := "../../tools/package/debian/vmesh-agent/"
	unit, err := os.ReadFile(dir + "vmesh-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(line, "ExecStopPost=") || strings.HasPrefix(line, "ExecStop=") {
			t.Errorf("vmesh-agent.service: %q: the capture must outlive a stop or a crash", line)
		}
	}
	prerm, err := os.ReadFile(dir + "prerm")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^if \[ "\$1" = remove \] && \[ -x /usr/lib/vmesh-agent/vmesh \]; then\n\t/usr/lib/vmesh-agent/vmesh agent cleanup`).Match(prerm) {
		t.Errorf("prerm does not run `vmesh agent cleanup` on remove (and only then):\n%s", prerm)
	}
}
