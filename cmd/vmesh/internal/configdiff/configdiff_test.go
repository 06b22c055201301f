package configdiff_test

import (
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/vmesh/internal/configdiff"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

const base = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: greeter, namespace: demo}
spec:
  hosts: [greeter.demo.internal]
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}, {address: 10.0.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing, namespace: other}
spec:
  hosts: [billing.other.internal]
  ports: [{number: 9000, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.1.1}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: other}
spec:
  egress:
  - hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: greeter, namespace: demo}
spec:
  host: greeter.demo.internal
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: greeter, namespace: demo}
spec:
  hosts: [greeter.demo.internal]
  http:
  - route:
    - {destination: {host: greeter.demo.internal, subset: v1}, weight: WEIGHT_V1}
    - {destination: {host: greeter.demo.internal, subset: v2}, weight: WEIGHT_V2}
`

func decode(t *testing.T, doc string) []*store.Object {
	t.Helper()
	objs, errs := filestore.Decode("mesh.yaml", []byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return objs
}

func TestDiffListsExactlyTheProxiesRoutingToTheHost(t *testing.T) {
	from := decode(t, strings.NewReplacer("WEIGHT_V1", "100", "WEIGHT_V2", "0").Replace(base))
	to := decode(t, strings.NewReplacer("WEIGHT_V1", "80", "WEIGHT_V2", "20").Replace(base))
	proxies := []*xds.Proxy{
		{ID: "client-demo", Kind: xds.KindGRPC, Namespace: "demo"},
		{ID: "client-demo-2", Kind: xds.KindGRPC, Namespace: "demo", Labels: map[string]string{"app": "x"}},
		{ID: "billing-client", Kind: xds.KindGRPC, Namespace: "other"}, // its Sidecar hides greeter
	}
	diffs, err := configdiff.Diff(from, to, proxies)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 || diffs[0].Proxy != "client-demo" || diffs[1].Proxy != "client-demo-2" {
		t.Fatalf("want exactly the two demo clients, got %+v", diffs)
	}
	for _, d := range diffs {
		if len(d.Changes) != 1 || d.Changes[0].Type != "route" || d.Changes[0].Op != configdiff.Changed {
			t.Fatalf("%s: want one changed route, got %+v", d.Proxy, d.Changes)
		}
		if !strings.Contains(d.Changes[0].Diff, "20") {
			t.Errorf("field diff does not show the new weight:\n%s", d.Changes[0].Diff)
		}
	}
	text := configdiff.Format(diffs)
	if !strings.Contains(text, "proxy client-demo (grpc)") || !strings.Contains(text, "changed route") {
		t.Errorf("format:\n%s", text)
	}

	// Removing the billing service shows up as removed resources, for its own client only.
	var fewer []*store.Object
	for _, o := range from {
		if o.Name != "billing" {
			fewer = append(fewer, o)
		}
	}
	diffs, err = configdiff.Diff(from, fewer, proxies)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		for _, c := range d.Changes {
			if c.Op != configdiff.Removed {
				t.Errorf("%s: unexpected %s %s %s", d.Proxy, c.Op, c.Type, c.Name)
			}
		}
	}
	if len(diffs) == 0 {
		t.Fatal("removing a service changed nothing")
	}

	// No change, no output.
	if diffs, _ := configdiff.Diff(from, from, proxies); len(diffs) != 0 {
		t.Fatalf("identical configs differ: %+v", diffs)
	}
}

// A proxy holding only its listener (a proxyless gRPC server: LDS only) is
// not listed as changing a route; a client holding the route is; and a
// group no told proxy is in gets a representative (issue 45).
func TestDiffTargetsHeldAndRepresentatives(t *testing.T) {
	from := decode(t, strings.NewReplacer("WEIGHT_V1", "100", "WEIGHT_V2", "0").Replace(base))
	to := decode(t, strings.NewReplacer("WEIGHT_V1", "80", "WEIGHT_V2", "20").Replace(base))
	server := configdiff.Target{Proxy: &xds.Proxy{ID: "greeter-v1", Kind: xds.KindGRPC, Namespace: "demo"},
		Held: map[string]map[string]bool{"listener": {xds.InboundListenerPrefix + "10.0.0.1:50051": true}}}
	client := configdiff.Target{Proxy: &xds.Proxy{ID: "client", Kind: xds.KindGRPC, Namespace: "demo"},
		Held: map[string]map[string]bool{"listener": {"greeter.demo.internal:50051": true}, "route": {"greeter.demo.internal:50051": true}}}
	res, err := configdiff.DiffTargets(from, to, []configdiff.Target{server, client}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Diffs) != 1 || res.Diffs[0].Proxy != "client" || res.Diffs[0].Representative || res.Uncovered != 0 {
		t.Fatalf("want the client alone, got %+v", res)
	}

	// Only the LDS-only server told about: it is not listed, and it does
	// not stand for the clients of its group, which a representative shows.
	res, err = configdiff.DiffTargets(from, to, []configdiff.Target{server}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Diffs) != 1 || !res.Diffs[0].Representative || res.Diffs[0].Changes[0].Type != "route" {
		t.Fatalf("want a representative changing its route, got %+v", res.Diffs)
	}

	// Nobody told about: a representative of each kind in demo, none in other.
	res, err = configdiff.DiffTargets(from, to, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, d := range res.Diffs {
		if !d.Representative || !strings.HasPrefix(d.Proxy, "demo/") || d.Note == "" {
			t.Errorf("%+v", d)
		}
		kinds[d.Kind] = true
	}
	if !kinds["grpc"] || !kinds["sidecar"] || res.Uncovered < 2 {
		t.Errorf("representatives: %+v", res)
	}
	if text := configdiff.Format(res.Diffs); !strings.Contains(text, "representative (no proxy told about is in its group)") {
		t.Errorf("format:\n%s", text)
	}
}
