package xds_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds"
)

// proxyConfig is everything a proxy is served from one snapshot, each
// resource serialised (deterministically), by type and name.
func proxyConfig(t *testing.T, s *model.Snapshot, p *xds.Proxy) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(typ string, name string, m proto.Message) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out[typ+"/"+name] = b
	}
	lds, err := xds.Listeners(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lds {
		add("lds", l.GetName(), l)
	}
	rds, err := xds.Routes(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rds {
		add("rds", r.GetName(), r)
	}
	cds, err := xds.Clusters(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cds {
		add("cds", c.GetName(), c)
	}
	eds, err := xds.Endpoints(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eds {
		add("eds", e.GetClusterName(), e)
	}
	// The server listeners a proxyless server asks for by name.
	for _, addr := range []string{"10.0.0.1:17070", "0.0.0.0:19090"} {
		if l, err := xds.InboundListener(s, p, xds.InboundListenerPrefix+addr); err == nil {
			add("inbound", addr, l)
		}
	}
	return out
}

// TestEqualKeysEqualConfig: the group key is derived from what a proxy's
// View lets the generators read, so any two proxies with equal keys get
// the same config, whatever else differs between them. Proxies of both
// kinds, varied in every field a node sets, are grouped by key over the
// rich fixture; every member of a group must get its group's first
// member's config, resource for resource and byte for byte. And an input
// the generators read (an IP of a sidecar, a label a policy selects)
// changes the key.
func TestEqualKeysEqualConfig(t *testing.T) {
	s := richSnapshot(t)
	var proxies []*xds.Proxy
	for _, kind := range []xds.ProxyKind{xds.KindSidecar, xds.KindGRPC, xds.KindRouter} {
		for _, id := range []string{"a", "b"} {
			for _, ns := range []string{"default", "shop"} {
				for _, labels := range []map[string]string{nil, {"app": "shop"}, {"app": "x"}, {"app": "shop", "version": "v1"}} {
					for _, ips := range [][]string{nil, {"10.0.0.1"}, {"10.9.9.9"}} {
						for _, wl := range []string{"", "shop-1"} {
							for _, loc := range []string{"", "eu/west/a"} {
								proxies = append(proxies, &xds.Proxy{ID: id, Kind: kind, Namespace: ns, Labels: labels, IPs: ips, WorkloadName: wl, Locality: loc})
							}
						}
					}
				}
			}
		}
	}
	type group struct {
		first *xds.Proxy
		cfg   map[string][]byte
		n     int
	}
	groups := map[string]*group{}
	shared := map[xds.ProxyKind]int{}
	for _, p := range proxies {
		key := xds.GroupKey(s, p)
		cfg := proxyConfig(t, s, p)
		g := groups[key]
		if g == nil {
			groups[key] = &group{first: p, cfg: cfg, n: 1}
			continue
		}
		g.n++
		if g.n == 2 {
			shared[p.Kind]++
		}
		if err := sameConfig(g.cfg, cfg); err != nil {
			t.Errorf("key %q: %+v and %+v get different config: %v", key, *g.first, *p, err)
		}
	}
	// Not vacuous: each kind has groups of several proxies, and several
	// groups.
	if shared[xds.KindSidecar] == 0 || shared[xds.KindGRPC] == 0 || shared[xds.KindRouter] == 0 || len(groups) < 10 {
		t.Fatalf("%d groups, %v shared by several proxies: the fixture groups too little", len(groups), shared)
	}

	// An input the generators read changes the key.
	envoy := &xds.Proxy{ID: "a", Kind: xds.KindSidecar, Namespace: "default", Labels: map[string]string{"app": "shop"}, IPs: []string{"10.0.0.1"}}
	moved := *envoy
	moved.IPs = []string{"10.0.0.2"}
	if xds.GroupKey(s, envoy) == xds.GroupKey(s, &moved) {
		t.Error("sidecars with other IPs (their inbound side) share a key")
	}
	if sameConfig(proxyConfig(t, s, envoy), proxyConfig(t, s, &moved)) == nil {
		t.Error("the fixture gives the sidecars of 10.0.0.1 and 10.0.0.2 the same config: the case shows nothing")
	}
	client := &xds.Proxy{ID: "a", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"app": "x"}}
	selected := *client
	selected.Labels = map[string]string{"app": "shop"} // the shop-admin PeerAuthentication selects it
	if xds.GroupKey(s, client) == xds.GroupKey(s, &selected) {
		t.Error("a label that a PeerAuthentication selects did not change a proxyless key")
	}
	if sameConfig(proxyConfig(t, s, client), proxyConfig(t, s, &selected)) == nil {
		t.Error("the fixture gives app=x and app=shop the same proxyless config: the case shows nothing")
	}
	// A router's Gateways are its labels' (and its key names them); its
	// IPs and other labels are not read.
	router := &xds.Proxy{ID: "a", Kind: xds.KindRouter, Namespace: "default", Labels: map[string]string{"app": "shop"}}
	v1 := *router
	v1.Labels = map[string]string{"app": "shop", "version": "v1"}
	if xds.GroupKey(s, router) == xds.GroupKey(s, &v1) {
		t.Error("a label that a Gateway selects did not change a router's key")
	}
	if sameConfig(proxyConfig(t, s, router), proxyConfig(t, s, &v1)) == nil {
		t.Error("the fixture gives routers under shop-gw and shop-gw+v1-gw the same config: the case shows nothing")
	}
	elsewhere := *router
	elsewhere.IPs, elsewhere.Labels = []string{"10.9.9.9"}, map[string]string{"app": "shop", "team": "x"}
	if xds.GroupKey(s, router) != xds.GroupKey(s, &elsewhere) {
		t.Error("routers that differ only in IPs and a label no Gateway selects have different keys")
	}
}

// sameConfig reports how two proxies' configs differ; nil when they do not.
func sameConfig(a, b map[string][]byte) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d resources vs %d", len(a), len(b))
	}
	for n, x := range a {
		y, ok := b[n]
		if !ok {
			return fmt.Errorf("%s only in the first", n)
		}
		if !bytes.Equal(x, y) {
			return fmt.Errorf("%s differs", n)
		}
	}
	return nil
}
