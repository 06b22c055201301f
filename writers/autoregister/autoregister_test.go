package autoregister_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/autoregister"
)

const groupYAML = `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: greeter, namespace: demo}
spec:
  metadata:
    labels: {app: greeter, tier: backend}
    annotations: {team: greeters}
  template:
    ports: {grpc: 50051}
    serviceAccount: greeter
    labels: {tier: template, zone: a}
  probe:
    tcpSocket: {port: 50051}
`

func setup(t *testing.T, cfg autoregister.Config) (*store.Store, *autoregister.Registrar) {
	t.Helper()
	st := store.NewStore()
	objs, errs := filestore.Decode("group.yaml", []byte(groupYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := st.Replace(store.Source{Name: "dir:test"}, objs); err != nil {
		t.Fatal(err)
	}
	return st, autoregister.New(st, cfg, nil)
}

var entryKey = store.Key{Kind: store.KindWorkloadEntry, Namespace: "demo", Name: "greeter-10.1.2.3"}

func vm() autoregister.Agent {
	return autoregister.Agent{ID: "vm-1", Namespace: "demo", IPs: []string{"10.1.2.3"}, AutoRegisterGroup: "greeter",
		Labels: map[string]string{"version": "v2", "tier": "proxy"}, Locality: "eu/west-1"}
}

func TestRegisterHealthAndGrace(t *testing.T) {
	st, r := setup(t, autoregister.Config{Grace: 200 * time.Millisecond})
	ctx := context.Background()
	r.StreamOpened(ctx, 1, vm())
	r.StreamOpened(ctx, 2, vm()) // a second stream of the same VM (e.g. Envoy's and the agent's)
	o := st.Snapshot().Get(entryKey)
	if o == nil {
		t.Fatal("no WorkloadEntry registered")
	}
	we := o.Spec.(*networking.WorkloadEntry)
	if we.Address != "10.1.2.3" || we.Ports["grpc"] != 50051 || we.ServiceAccount != "greeter" || we.Locality != "eu/west-1" {
		t.Fatalf("entry spec: %v", we)
	}
	// template < group metadata < proxy labels
	if we.Labels["tier"] != "proxy" || we.Labels["app"] != "greeter" || we.Labels["zone"] != "a" || we.Labels["version"] != "v2" {
		t.Fatalf("labels: %v", we.Labels)
	}
	if o.Annotations["proxy.istio.io/health-checks-enabled"] != "true" || o.Annotations["team"] != "greeters" || o.Healthy != nil {
		t.Fatalf("annotations/health before any report: %v %v", o.Annotations, o.Healthy)
	}
	r.Health(2, true, "")
	if h := st.Snapshot().Get(entryKey).Healthy; h == nil || !*h {
		t.Fatal("healthy report not applied")
	}
	r.Health(2, false, "tcp 127.0.0.1:50051: connection refused")
	if h := st.Snapshot().Get(entryKey).Healthy; h == nil || *h {
		t.Fatal("unhealthy report not applied")
	}

	// One stream closing keeps the entry; the last one starts the grace period.
	r.StreamClosed(1)
	r.StreamClosed(2)
	if st.Snapshot().Get(entryKey) == nil {
		t.Fatal("entry removed before the grace period")
	}
	// Reconnecting within the grace period keeps it.
	r.StreamOpened(ctx, 3, vm())
	time.Sleep(400 * time.Millisecond)
	if st.Snapshot().Get(entryKey) == nil {
		t.Fatal("reconnected entry removed")
	}
	r.StreamClosed(3)
	deadline := time.Now().Add(5 * time.Second)
	for st.Snapshot().Get(entryKey) != nil {
		if time.Now().After(deadline) {
			t.Fatal("entry never removed after the grace period")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRegistrationNeedsTheGroupsIdentity(t *testing.T) {
	cases := []struct {
		name   string
		auth   autoregister.Authenticator
		proxy  func() autoregister.Agent
		wantOK bool
		// the refusal's reason and gRPC code when it is refused
		reason string
		code   codes.Code
	}{
		{name: "matching certificate", wantOK: true, proxy: vm,
			auth: func(context.Context) (string, string, error) { return "demo", "greeter", nil }},
		{name: "no certificate", proxy: vm, reason: autoregister.ReasonUnauthenticated, code: codes.Unauthenticated,
			auth: func(context.Context) (string, string, error) { return "", "", errors.New("no credentials") }},
		{name: "other service account", proxy: vm, reason: autoregister.ReasonIdentityMismatch, code: codes.PermissionDenied,
			auth: func(context.Context) (string, string, error) { return "demo", "intruder", nil }},
		{name: "other namespace", proxy: vm, reason: autoregister.ReasonIdentityMismatch, code: codes.PermissionDenied,
			auth: func(context.Context) (string, string, error) { return "prod", "greeter", nil }},
		{name: "unknown group", auth: nil, reason: autoregister.ReasonNoWorkloadGroup, code: codes.FailedPrecondition,
			proxy: func() autoregister.Agent { p := vm(); p.AutoRegisterGroup = "nope"; return p }},
		{name: "no IP", auth: nil, reason: autoregister.ReasonNoInstanceIPs, code: codes.InvalidArgument,
			proxy: func() autoregister.Agent { p := vm(); p.IPs = nil; return p }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, r := setup(t, autoregister.Config{Authenticate: c.auth})
			err := r.StreamOpened(context.Background(), 1, c.proxy())
			switch ref, ok := refusal.Of(err); {
			case c.wantOK && err != nil:
				t.Fatalf("refused: %v", err)
			case !c.wantOK && !ok:
				t.Fatalf("StreamOpened = %v, want a refusal", err)
			case !c.wantOK && (ref.Reason != c.reason || ref.Code != c.code || !ref.Permanent || ref.Fix == ""):
				t.Fatalf("refusal %+v, want reason %s, code %s, permanent, with a fix", ref, c.reason, c.code)
			case !c.wantOK:
				// What the agent gets over the wire says the same.
				wire, ok := refusal.Of(status.ErrorProto(status.Convert(err).Proto()))
				if !ok || *wire != *ref {
					t.Fatalf("over the wire: %+v, want %+v", wire, ref)
				}
			}
			got := 0
			for _, o := range st.Snapshot().List(store.KindWorkloadEntry) {
				if o.Origin.Source == autoregister.Source.Name {
					got++
				}
			}
			if (got == 1) != c.wantOK {
				t.Fatalf("registered %d entries, want ok=%v", got, c.wantOK)
			}
		})
	}
}

func TestFilesWinOverRegistrations(t *testing.T) {
	st, r := setup(t, autoregister.Config{})
	r.StreamOpened(context.Background(), 1, vm())
	manual := &store.Object{APIVersion: "networking.istio.io/v1", Spec: &networking.WorkloadEntry{Address: "10.9.9.9"}}
	manual.Key = entryKey
	if err := st.Replace(store.Source{Name: "dir:ops"}, []*store.Object{manual}); err != nil {
		t.Fatal(err)
	}
	if got := st.Snapshot().Get(entryKey).Spec.(*networking.WorkloadEntry).Address; got != "10.9.9.9" {
		t.Fatalf("registration beat a file: %s", got)
	}
}

// A VM whose Envoy connects (a node without GENERATOR=grpc) serves through
// its sidecar: its entry carries security.istio.io/tlsMode=istio, so Envoy
// clients reach it over automatic mTLS. A proxyless-only VM's entry does
// not (clients of a plaintext proxyless server must not start TLS), and the
// label outlives an Envoy restart.
func TestEnvoyStreamsMarkTheEntryForMTLS(t *testing.T) {
	st, r := setup(t, autoregister.Config{Grace: time.Minute})
	ctx := context.Background()
	label := func() string {
		return st.Snapshot().Get(entryKey).Spec.(*networking.WorkloadEntry).GetLabels()[meshlabels.TLSModeLabel]
	}
	r.StreamOpened(ctx, 1, vm()) // the agent's own proxyless stream
	if got := label(); got != "" {
		t.Fatalf("proxyless-only VM labelled tlsMode=%q", got)
	}
	envoy := vm()
	envoy.ID, envoy.Envoy = "sidecar~10.1.2.3~vm-1.demo~demo.svc.cluster.local", true
	r.StreamOpened(ctx, 2, envoy)
	if got := label(); got != meshlabels.TLSModeIstio {
		t.Fatalf("VM with Envoy: tlsMode=%q, want istio", got)
	}
	r.StreamClosed(2) // Envoy restarts
	r.StreamOpened(ctx, 3, vm())
	if got := label(); got != meshlabels.TLSModeIstio {
		t.Fatalf("tlsMode dropped while Envoy restarts: %q", got)
	}
}

// With Envoy, the agent's own stream (the only one that registers: Envoy's
// and the applications' nodes name no group) carries the tlsMode label in
// its LABELS; the entry keeps it.
func TestAgentStreamLabelledForEnvoyMarksTheEntry(t *testing.T) {
	st, r := setup(t, autoregister.Config{Grace: time.Minute})
	agent := vm()
	agent.Labels = map[string]string{"app": "cart", meshlabels.TLSModeLabel: meshlabels.TLSModeIstio}
	if err := r.StreamOpened(context.Background(), 1, agent); err != nil {
		t.Fatal(err)
	}
	if got := st.Snapshot().Get(entryKey).Spec.(*networking.WorkloadEntry).GetLabels()[meshlabels.TLSModeLabel]; got != meshlabels.TLSModeIstio {
		t.Fatalf("tlsMode=%q, want istio", got)
	}
}

// Registration follows the registering stream only: a stream of the same
// node without the group (an application, after the agent made its
// bootstrap) neither registers nor keeps the entry.
func TestOnlyTheAgentStreamKeepsTheEntry(t *testing.T) {
	st, r := setup(t, autoregister.Config{Grace: 100 * time.Millisecond})
	ctx := context.Background()
	if err := r.StreamOpened(ctx, 1, vm()); err != nil {
		t.Fatal(err)
	}
	app := vm()
	app.AutoRegisterGroup = ""
	if err := r.StreamOpened(ctx, 2, app); err != nil {
		t.Fatal(err)
	}
	r.StreamClosed(1) // the agent stops; the application stays
	deadline := time.Now().Add(2 * time.Second)
	for st.Snapshot().Get(entryKey) != nil {
		if time.Now().After(deadline) {
			t.Fatal("entry outlived the agent's stream by more than the grace period")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
