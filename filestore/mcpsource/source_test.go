package mcpsource_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore/mcpsource"
	"github.com/vmesh/vmesh/internal/mcptest"
	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

var vsType, _ = mcptypes.ByKind("VirtualService")

var vsKey = store.Key{Kind: store.KindVirtualService, Namespace: "default", Name: "echo"}

func vs(t *testing.T, name, version, dest string) *anypb.Any {
	t.Helper()
	spec := &networking.VirtualService{Hosts: []string{"echo.mesh.internal"}, Http: []*networking.HTTPRoute{{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: dest}}},
	}}}
	if dest == "" { // invalid: a route without a destination host
		spec.Http[0].Route[0].Destination.Host = ""
	}
	a, err := vsType.Encode(mcptypes.Resource{Namespace: "default", Name: name, Version: version, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// start runs a source against srv until the test ends and reads the
// subscription requests of its first stream.
func start(t *testing.T, srv *mcptest.Server, delta bool) (*mcpsource.Source, *store.Store) {
	t.Helper()
	st := store.NewStore()
	src, err := mcpsource.New(mcpsource.Config{Address: "xds://" + srv.Addr, Delta: delta}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := src.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	subscriptions(t, srv, delta)
	return src, st
}

// subscriptions reads the requests that open a stream: one per type, the
// first with the node (GENERATOR: api, as istiod's client sends).
func subscriptions(t *testing.T, srv *mcptest.Server, delta bool) {
	t.Helper()
	seen := map[string]bool{}
	for i := range len(mcptypes.Types()) {
		var url string
		var md map[string]any
		if delta {
			r := srv.NextDelta(t)
			url, md = r.GetTypeUrl(), r.GetNode().GetMetadata().AsMap()
		} else {
			r := srv.NextSotW(t)
			url, md = r.GetTypeUrl(), r.GetNode().GetMetadata().AsMap()
		}
		if i == 0 && md["GENERATOR"] != "api" {
			t.Errorf("first request's node metadata %v, want GENERATOR: api", md)
		}
		seen[url] = true
	}
	for _, ty := range mcptypes.Types() {
		if !seen[ty.URL()] {
			t.Errorf("no subscription to %s", ty.URL())
		}
	}
}

func dest(t *testing.T, st *store.Store) string {
	t.Helper()
	o := st.Snapshot().Get(vsKey)
	if o == nil {
		return ""
	}
	return o.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute()[0].GetDestination().GetHost()
}

func sourceStatus(st *store.Store, name string) store.SourceStatus {
	for _, s := range st.Snapshot().Sources {
		if s.Source == name {
			return s
		}
	}
	return store.SourceStatus{}
}

func sotw(t *testing.T, srv *mcptest.Server, version string, res ...*anypb.Any) *discovery.DiscoveryRequest {
	t.Helper()
	srv.SendSotW(t, &discovery.DiscoveryResponse{TypeUrl: vsType.URL(), VersionInfo: version, Nonce: "n" + version, Resources: res})
	ack := srv.NextSotW(t)
	if ack.GetResponseNonce() != "n"+version {
		t.Fatalf("answer to %s names nonce %q", version, ack.GetResponseNonce())
	}
	return ack
}

// TestSotWFollowsServer: a VirtualService created, changed and deleted on
// the server is created, changed and deleted in the Store, with its
// provenance, and every response is ACKed.
func TestSotWFollowsServer(t *testing.T) {
	srv := mcptest.Start(t)
	src, st := start(t, srv, false)

	if ack := sotw(t, srv, "1", vs(t, "echo", "r1", "echo-v2.mesh.internal")); ack.GetErrorDetail() != nil || ack.GetVersionInfo() != "1" {
		t.Fatalf("create not ACKed: %v", ack)
	}
	o := st.Snapshot().Get(vsKey)
	if o == nil {
		t.Fatal("VirtualService not in the Store")
	}
	want := store.Origin{Source: "mcp:xds://" + srv.Addr, File: "networking.istio.io/v1/VirtualService default/echo", Version: "r1"}
	if o.Origin != want {
		t.Errorf("origin %+v, want %+v", o.Origin, want)
	}
	if got := o.Origin.String(); !strings.Contains(got, "default/echo @ r1") {
		t.Errorf("origin renders %q", got)
	}
	if src.Name() != want.Source {
		t.Errorf("source name %q", src.Name())
	}
	select {
	case <-src.Ready():
		t.Error("ready before every type's first response")
	default:
	}

	sotw(t, srv, "2", vs(t, "echo", "r2", "echo-v3.mesh.internal"))
	if d := dest(t, st); d != "echo-v3.mesh.internal" {
		t.Errorf("after the change the route goes to %q", d)
	}
	if s := sourceStatus(st, src.Name()); s.Revision != "2" || len(s.Errors) != 0 || s.Connection != "connected" {
		t.Errorf("status %+v", s)
	}
	sotw(t, srv, "3")
	if o := st.Snapshot().Get(vsKey); o != nil {
		t.Errorf("deleted VirtualService still in the Store: %v", o.Origin)
	}

	// A resource without a body is a delete (Istio's apigen documents
	// incremental deletes so).
	sotw(t, srv, "4", vs(t, "echo", "r4", "echo-v2.mesh.internal"))
	empty, err := anypb.New(&mcp.Resource{Metadata: &mcp.Metadata{Name: "default/echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if ack := sotw(t, srv, "5", empty); ack.GetErrorDetail() != nil {
		t.Fatalf("a resource without a body NACKed: %v", ack.GetErrorDetail())
	}
	if o := st.Snapshot().Get(vsKey); o != nil {
		t.Errorf("VirtualService sent without a body still in the Store")
	}
}

// TestBadResourceNACKed: a resource that does not validate is NACKed with
// its name and reason, its last good version keeps serving, and the other
// resources of the response apply.
func TestBadResourceNACKed(t *testing.T) {
	srv := mcptest.Start(t)
	src, st := start(t, srv, false)
	sotw(t, srv, "1", vs(t, "echo", "r1", "echo-v2.mesh.internal"))

	nack := sotw(t, srv, "2", vs(t, "echo", "r2", ""), vs(t, "other", "r1", "echo-v2.mesh.internal"))
	msg := nack.GetErrorDetail().GetMessage()
	if nack.GetErrorDetail() == nil || nack.GetVersionInfo() != "1" {
		t.Fatalf("bad resource not NACKed at the last good version: %v", nack)
	}
	for _, want := range []string{"networking.istio.io/v1/VirtualService default/echo", "destination.host", `"r2"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK %q does not name %s", msg, want)
		}
	}
	if d := dest(t, st); d != "echo-v2.mesh.internal" {
		t.Errorf("the last good version is not served: route to %q", d)
	}
	if st.Snapshot().Get(store.Key{Kind: store.KindVirtualService, Namespace: "default", Name: "other"}) == nil {
		t.Error("the good resource of the NACKed response was not applied")
	}
	s := sourceStatus(st, src.Name())
	if len(s.Errors) != 1 || s.Errors[0].File != "networking.istio.io/v1/VirtualService default/echo" || !strings.Contains(s.Held, "last good version") {
		t.Errorf("status %+v", s)
	}

	// The server fixes it: ACKed, applied, the error gone.
	if ack := sotw(t, srv, "3", vs(t, "echo", "r3", "echo-v3.mesh.internal")); ack.GetErrorDetail() != nil {
		t.Fatalf("fixed resource NACKed: %v", ack.GetErrorDetail())
	}
	if d := dest(t, st); d != "echo-v3.mesh.internal" {
		t.Errorf("route to %q after the fix", d)
	}
	if s := sourceStatus(st, src.Name()); len(s.Errors) != 0 || s.Held != "" {
		t.Errorf("status after the fix %+v", s)
	}
	if st := src.Stats(); st.NACKs != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestDisconnectKeepsConfig: while the server is gone the Store keeps its
// objects and the status says so; when it returns, the client subscribes
// again with the version it last accepted and follows.
func TestDisconnectKeepsConfig(t *testing.T) {
	srv := mcptest.Start(t)
	src, st := start(t, srv, false)
	sotw(t, srv, "1", vs(t, "echo", "r1", "echo-v2.mesh.internal"))

	srv.Stop()
	xdstest.Eventually(t, "the disconnect reported", func() bool {
		s := sourceStatus(st, src.Name())
		return len(s.Errors) == 1 && strings.Contains(s.Errors[0].Message, "disconnected") && strings.HasPrefix(s.Connection, "disconnected: ")
	})
	s := sourceStatus(st, src.Name())
	if d := dest(t, st); d != "echo-v2.mesh.internal" {
		t.Errorf("config lost on disconnect: route to %q", d)
	}
	if !strings.Contains(s.Held, "keeping its 1 objects (version 1)") {
		t.Errorf("held %q", s.Held)
	}

	srv.Restart(t)
	seen := false
	for range len(mcptypes.Types()) {
		r := srv.NextSotW(t)
		if r.GetTypeUrl() == vsType.URL() {
			seen = r.GetVersionInfo() == "1"
		}
	}
	if !seen {
		t.Error("the resubscription does not name the last accepted version")
	}
	sotw(t, srv, "2", vs(t, "echo", "r2", "echo-v3.mesh.internal"))
	if d := dest(t, st); d != "echo-v3.mesh.internal" {
		t.Errorf("after the server returned: route to %q", d)
	}
	if s := sourceStatus(st, src.Name()); len(s.Errors) != 0 || s.Held != "" || s.Connection != "connected" {
		t.Errorf("status after reconnecting %+v", s)
	}
}

// TestDeltaFollowsServer: delta ADS, with removals.
func TestDeltaFollowsServer(t *testing.T) {
	srv := mcptest.Start(t)
	_, st := start(t, srv, true)
	send := func(nonce string, removed []string, res ...*anypb.Any) *discovery.DeltaDiscoveryRequest {
		t.Helper()
		var rs []*discovery.Resource
		for _, a := range res {
			rs = append(rs, &discovery.Resource{Name: "default/echo", Version: nonce, Resource: a})
		}
		srv.SendDelta(t, &discovery.DeltaDiscoveryResponse{TypeUrl: vsType.URL(), SystemVersionInfo: nonce, Nonce: nonce, Resources: rs, RemovedResources: removed})
		ack := srv.NextDelta(t)
		if ack.GetResponseNonce() != nonce {
			t.Fatalf("answer names nonce %q, want %q", ack.GetResponseNonce(), nonce)
		}
		return ack
	}
	send("1", nil, vs(t, "echo", "", "echo-v2.mesh.internal"))
	if d := dest(t, st); d != "echo-v2.mesh.internal" {
		t.Errorf("create: route to %q", d)
	}
	if v := st.Snapshot().Get(vsKey).Origin.Version; v != "1" {
		t.Errorf("version %q, want the resource's (1)", v)
	}
	send("2", nil, vs(t, "echo", "", "echo-v3.mesh.internal"))
	if d := dest(t, st); d != "echo-v3.mesh.internal" {
		t.Errorf("change: route to %q", d)
	}
	if nack := send("3", nil, vs(t, "echo", "", "")); nack.GetErrorDetail() == nil || !strings.Contains(nack.GetErrorDetail().GetMessage(), "default/echo") {
		t.Errorf("bad resource not NACKed by name: %v", nack)
	}
	if d := dest(t, st); d != "echo-v3.mesh.internal" {
		t.Errorf("bad resource: route to %q", d)
	}
	// A resource named other than its object is refused.
	wrong := &discovery.DeltaDiscoveryResponse{TypeUrl: vsType.URL(), Nonce: "4", Resources: []*discovery.Resource{{Name: "default/other", Resource: vs(t, "echo", "", "x.mesh.internal")}}}
	srv.SendDelta(t, wrong)
	if nack := srv.NextDelta(t); nack.GetErrorDetail() == nil {
		t.Error("resource named default/other holding default/echo not NACKed")
	}
	send("5", []string{"default/echo"})
	if o := st.Snapshot().Get(vsKey); o != nil {
		t.Error("removed VirtualService still in the Store")
	}
}
