package mcptypes_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/store"
)

// TestTypeURLs pins the type URLs to Istio 1.31's (collections.Pilot's
// GroupVersionKind strings) and checks every kind is one the Store knows.
func TestTypeURLs(t *testing.T) {
	want := map[string]string{
		"ServiceEntry":          "networking.istio.io/v1/ServiceEntry",
		"WorkloadEntry":         "networking.istio.io/v1/WorkloadEntry",
		"WorkloadGroup":         "networking.istio.io/v1/WorkloadGroup",
		"VirtualService":        "networking.istio.io/v1/VirtualService",
		"DestinationRule":       "networking.istio.io/v1/DestinationRule",
		"Sidecar":               "networking.istio.io/v1/Sidecar",
		"Gateway":               "networking.istio.io/v1/Gateway",
		"PeerAuthentication":    "security.istio.io/v1/PeerAuthentication",
		"AuthorizationPolicy":   "security.istio.io/v1/AuthorizationPolicy",
		"RequestAuthentication": "security.istio.io/v1/RequestAuthentication",
		"Telemetry":             "telemetry.istio.io/v1/Telemetry",
	}
	got := map[string]string{}
	for _, ty := range mcptypes.Types() {
		got[ty.Kind] = ty.URL()
		found := false
		for _, k := range store.Kinds {
			found = found || string(k) == ty.Kind
		}
		if !found {
			t.Errorf("%s is not a store.Kind", ty.Kind)
		}
		back, v, ok := mcptypes.ByURL(ty.URL())
		if !ok || back.Kind != ty.Kind || v != "v1" {
			t.Errorf("ByURL(%s) = %v %q %v", ty.URL(), back.Kind, v, ok)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("type URLs (-want +got):\n%s", diff)
	}
	if ty, v, ok := mcptypes.ByURL("networking.istio.io/v1alpha3/VirtualService"); !ok || ty.Kind != "VirtualService" || v != "v1alpha3" {
		t.Errorf("alias v1alpha3: %v %q %v", ty.Kind, v, ok)
	}
	for _, bad := range []string{"networking.istio.io/v2/VirtualService", "security.istio.io/v1/VirtualService", "core/v1alpha1/MeshConfig", "VirtualService"} {
		if _, _, ok := mcptypes.ByURL(bad); ok {
			t.Errorf("ByURL(%q) found a type", bad)
		}
	}
	if ty, _ := mcptypes.ByKind("VirtualService"); ty.SpecTypeURL() != "type.googleapis.com/istio.networking.v1alpha3.VirtualService" {
		t.Errorf("spec type URL %s", ty.SpecTypeURL())
	}
}

// TestEncodeDecode round-trips a resource and checks the envelope is
// Istio's (an mcp.Resource named namespace/name with the spec as body).
func TestEncodeDecode(t *testing.T) {
	ty, _ := mcptypes.ByKind("VirtualService")
	in := mcptypes.Resource{
		Namespace: "default", Name: "reviews", Version: "7",
		Labels: map[string]string{"app": "reviews"}, Annotations: map[string]string{"a": "b"},
		Created: time.Unix(1700000000, 0).UTC(),
		Spec:    &networking.VirtualService{Hosts: []string{"reviews"}},
	}
	a, err := ty.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetTypeUrl() != mcptypes.ResourceTypeURL {
		t.Fatalf("type %s", a.GetTypeUrl())
	}
	env := &mcp.Resource{}
	if err := a.UnmarshalTo(env); err != nil {
		t.Fatal(err)
	}
	if env.GetMetadata().GetName() != "default/reviews" || env.GetBody().GetTypeUrl() != ty.SpecTypeURL() {
		t.Fatalf("envelope %v", env)
	}
	out, err := ty.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out, protocmp.Transform()); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}

	// Refusals: another kind's body, another envelope, a bad name.
	dr, _ := mcptypes.ByKind("DestinationRule")
	if _, err := dr.Decode(a); err == nil {
		t.Error("a VirtualService body decoded as a DestinationRule")
	}
	if _, err := ty.Encode(mcptypes.Resource{Namespace: "a", Name: "b", Spec: &networking.Gateway{}}); err == nil {
		t.Error("encoded a Gateway spec as a VirtualService")
	}
	body, _ := anypb.New(&networking.VirtualService{})
	if _, err := ty.Decode(body); err == nil {
		t.Error("decoded a bare spec without the MCP envelope")
	}
	noNS, _ := anypb.New(&mcp.Resource{Metadata: &mcp.Metadata{Name: "reviews"}})
	if _, err := ty.Decode(noNS); err == nil {
		t.Error("decoded a resource not named namespace/name")
	}
	deleted, _ := anypb.New(&mcp.Resource{Metadata: &mcp.Metadata{Name: "default/reviews"}})
	if r, err := ty.Decode(deleted); err != nil || r.Spec != nil {
		t.Errorf("a resource without body: %v %v", r, err)
	}
}

// TestEncodeIsDeterministic: equal objects give equal bytes, however their
// maps were filled (anypb.New writes map entries in Go's random iteration
// order: a server comparing encodings would see changes that are not).
func TestEncodeIsDeterministic(t *testing.T) {
	ty, _ := mcptypes.ByKind("DestinationRule")
	resource := func(reverse bool) mcptypes.Resource {
		labels, annotations, subsetLabels := map[string]string{}, map[string]string{}, map[string]string{}
		for i := range 16 {
			j := i
			if reverse {
				j = 15 - i
			}
			k := fmt.Sprintf("k%02d", j)
			labels[k], annotations[k], subsetLabels[k] = "l"+k, "a"+k, "s"+k
		}
		return mcptypes.Resource{Namespace: "default", Name: "reviews", Labels: labels, Annotations: annotations,
			Spec: &networking.DestinationRule{Host: "reviews", Subsets: []*networking.Subset{{Name: "v1", Labels: subsetLabels}}}}
	}
	first, err := ty.Encode(resource(false))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		a, err := ty.Encode(resource(i%2 == 1))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.GetValue(), first.GetValue()) {
			t.Fatalf("encoding %d of an equal object differs from the first", i+1)
		}
	}
}
