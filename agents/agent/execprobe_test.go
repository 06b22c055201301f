package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/testenv"
)

// groupPlane is a control plane that serves the agent a WorkloadGroup with
// an exec readiness probe, as a config writer would write it, and records
// every request the agent sends, whole, as text.
type groupPlane struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	ca      *ca.CA
	command []string
	reqs    chan seen
	wire    chan string
}

func (c *groupPlane) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if _, err := c.ca.PeerIdentity(s.Context()); err != nil {
		return status.Errorf(codes.Unauthenticated, "%v", err)
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		c.wire <- prototext.Format(r)
		c.reqs <- seen{typeURL: r.GetTypeUrl(), healthy: r.GetErrorDetail() == nil, detail: r.GetErrorDetail().GetMessage()}
		if r.GetTypeUrl() == xdsproxy.WorkloadGroupType && r.GetResponseNonce() == "" {
			wg, err := anypb.New(&networking.WorkloadGroup{Probe: &networking.ReadinessProbe{
				PeriodSeconds: 1, TimeoutSeconds: 2,
				HealthCheckMethod: &networking.ReadinessProbe_Exec{Exec: &networking.ExecHealthCheckConfig{Command: c.command}},
			}})
			if err != nil {
				return err
			}
			if err := s.Send(&discoveryv3.DiscoveryResponse{TypeUrl: r.GetTypeUrl(), VersionInfo: "1", Nonce: "1", Resources: []*anypb.Any{wg}}); err != nil {
				return err
			}
		}
	}
}

// startGroupProbe runs an agent whose WorkloadGroup's probe runs command.
func startGroupProbe(t *testing.T, command []string, edit func(*agent.Config)) (*groupPlane, *rig) {
	t.Helper()
	cp := &groupPlane{command: command, reqs: make(chan seen, 256), wire: make(chan string, 256)}
	r := startWith(t, func(s *grpc.Server, c *ca.CA) {
		cp.ca = c
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, cp)
	}, edit)
	return cp, r
}

// nextHealth waits for a health report whose detail satisfies ok.
func (c *groupPlane) nextHealth(t *testing.T, ok func(seen) bool) seen {
	t.Helper()
	timeout := time.After(15 * time.Second)
	var last seen
	for {
		select {
		case s := <-c.reqs:
			if s.typeURL != xdsproxy.HealthInfoType {
				continue
			}
			last = s
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("no such health report reached the control plane; last: %+v", last)
		}
	}
}

// TestExecProbeFromGroupDisabled: a WorkloadGroup's exec probe reaches an
// agent whose VM did not allow exec probes (no --exec-probe-user): the
// command never runs (as root it would create the file) and the control
// plane is told the VM is not ready, with the stable reason.
func TestExecProbeFromGroupDisabled(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran-as-root")
	cp, _ := startGroupProbe(t, []string{"/bin/sh", "-c", "touch " + marker}, nil)
	s := cp.nextHealth(t, func(s seen) bool { return s.detail == health.ExecDisabledReason })
	if s.healthy {
		t.Fatalf("report %+v", s)
	}
	// A few probe periods (1 s) later: still not run, never healthy.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the control plane's exec probe ran on a VM that does not allow it (%v)", err)
		}
		select {
		case s := <-cp.reqs:
			if s.typeURL == xdsproxy.HealthInfoType && s.healthy {
				t.Fatalf("reported healthy with a disabled exec probe: %+v", s)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestExecProbeFromGroupOutputStaysOnVM: with exec probes allowed
// (nobody), a failing probe that prints a secret is reported by its exit
// status alone: no request the control plane receives holds the secret.
func TestExecProbeFromGroupOutputStaysOnVM(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (exec probes switch to another user)")
	}
	const secret = "SECRET-agent-probe-91c2"
	cp, r := startGroupProbe(t, []string{"/bin/sh", "-c", "echo " + secret + "; echo " + secret + " >&2; exit 7"}, func(c *agent.Config) {
		c.ExecProbeUser = "nobody"
	})
	s := cp.nextHealth(t, func(s seen) bool { return strings.HasPrefix(s.detail, "exec probe:") })
	if s.healthy || s.detail != "exec probe: exit status 7" {
		t.Fatalf("report %+v, want unhealthy with %q", s, "exec probe: exit status 7")
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
	r.done <- nil // for the rig's cleanup
	n := 0
	for drained := false; !drained; {
		select {
		case w := <-cp.wire:
			n++
			if strings.Contains(w, secret) {
				t.Fatalf("the control plane received the probe's output:\n%s", w)
			}
		default:
			drained = true
		}
	}
	if n == 0 {
		t.Fatal("no request recorded")
	}
}

// TestExecProbeUserRootRefused: the agent refuses to start with root (or an
// unknown account) as its exec probe user, and with an exec --probe but no
// exec probe user.
func TestExecProbeUserRootRefused(t *testing.T) {
	c := agenttest.NewCA(t, nil)
	bundleDir, _ := c.Bundle(t, "shop", "cart", "cart-vms", nil)
	base := agent.Config{BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: t.TempDir(), WorkloadName: "vm-1", IPs: []string{"127.0.0.1"}}
	for _, user := range []string{"root", "vmesh-no-such-user"} {
		cfg := base
		cfg.ExecProbeUser = user
		if _, err := agent.New(cfg, agenttest.Logger(t), nil); err == nil {
			t.Errorf("New accepted exec probe user %q", user)
		}
	}
	cfg := base
	cfg.Probe = &health.Probe{Exec: &health.Exec{Command: []string{"true"}}}
	if _, err := agent.New(cfg, agenttest.Logger(t), nil); err == nil || !strings.Contains(err.Error(), health.ExecDisabledReason) {
		t.Errorf("New with an exec --probe and no exec probe user: %v", err)
	}
	if os.Geteuid() == 0 {
		cfg.ExecProbeUser = "nobody"
		if _, err := agent.New(cfg, agenttest.Logger(t), nil); err != nil {
			t.Errorf("New with exec probe user nobody: %v", err)
		}
	}
}
