// Package gentest holds the fixtures the tests of xds and of its kind
// packages share: a config to start from, edits of it, snapshots of it,
// and the comparison of generations by their resources' hashes.
package gentest

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
)

// Base is the config the incremental tests start from: 30
// services over 3 namespaces, 10 with a VirtualService and DestinationRule,
// plus a VirtualService routing svc-0011 to svc-0012 (a cross-host
// destination), a wildcard VirtualService for *.other.internal routing to
// svc-0013, a VirtualService splitting svc-0017 between itself and two
// destinations the proxies have no cluster for (a subset no
// DestinationRule defines, a host no ServiceEntry declares: issue 15 item
// 6), and mesh-wide STRICT mTLS (so endpoints' service accounts reach the
// clusters).
func Base() []*store.Object {
	objs := modeltest.Objects(modeltest.Size{Services: 30, EndpointsPerService: 4, Routes: 10, Namespaces: 3})
	for _, o := range objs {
		if we, ok := o.Spec.(*networking.WorkloadEntry); ok {
			we.ServiceAccount = "sa-" + o.Name
		}
	}
	objs = append(objs,
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "cross"},
			Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(11)}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: modeltest.Host(12), Subset: "v2"}, Weight: 50},
					{Destination: &networking.Destination{Host: modeltest.Host(11)}, Weight: 50},
				},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-0", Name: "svc-0012"},
			Spec: &networking.DestinationRule{Host: modeltest.Host(12), Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			}}},
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "other"},
			Spec: &networking.ServiceEntry{Hosts: []string{"a.other.internal", "b.other.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:     []*networking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "GRPC"}},
				Endpoints: []*networking.WorkloadEntry{{Address: "10.9.9.9"}}}},
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "wild"},
			Spec: &networking.VirtualService{Hosts: []string{"*.other.internal"}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: modeltest.Host(13), Port: &networking.PortSelector{Number: 7070}}}},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "partial"},
			Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(17)}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: modeltest.Host(17)}, Weight: 50},
					{Destination: &networking.Destination{Host: modeltest.Host(17), Subset: "canary"}, Weight: 30},
					{Destination: &networking.Destination{Host: LateHost}, Weight: 20},
				},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindPeerAuthentication, Namespace: "istio-system", Name: "default"},
			Spec: &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}},
	)
	return objs
}

// LateHost is the host Base routes to without a ServiceEntry
// declaring it.
const LateHost = "late.other.internal"

// Edit returns objs with the object of key replaced by f's result (f gets
// a clone; nil removes it), or with add appended.
func Edit(objs []*store.Object, kind store.Kind, ns, name string, f func(o *store.Object) *store.Object) []*store.Object {
	var out []*store.Object
	found := false
	for _, o := range objs {
		if o.Kind == kind && o.Namespace == ns && o.Name == name {
			found = true
			c := *o
			if n := f(&c); n != nil {
				out = append(out, n)
			}
			continue
		}
		out = append(out, o)
	}
	if !found {
		if n := f(nil); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// Clone returns a deep copy of m.
func Clone[T proto.Message](m T) T { return proto.Clone(m).(T) }

// Snapshot replaces st's config with objs and builds the model of it.
func Snapshot(t testing.TB, st *store.Store, objs []*store.Object) *model.Snapshot {
	t.Helper()
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

// Hashes returns the hashes of g's resources, by type and name.
func Hashes(g *gen.Generation) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range gen.TypeURLs() {
		out[t] = map[string]string{}
		for n, r := range g.Types[t].All() {
			out[t][n] = r.Hash
		}
	}
	return out
}

// OnlyIn returns the names a has and b has not, sorted.
func OnlyIn(a, b map[string]string) []string {
	var out []string
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Differ returns the names whose hashes differ between a and b, sorted.
func Differ(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; ok && v != w {
			out = append(out, fmt.Sprint(k))
		}
	}
	slices.Sort(out)
	return out
}
