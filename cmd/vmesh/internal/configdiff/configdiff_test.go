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
