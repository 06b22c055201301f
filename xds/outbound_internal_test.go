package xds

import (
	"bytes"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/filestore"
	"google.golang.org/protobuf/proto"
)

// TestRouteResourceIsProtoMarshal: a sidecar route configuration put
// together from its virtual hosts' bytes (routeResource) is byte for byte
// what proto.Marshal makes of it, whether the virtual hosts were
// serialised anew or shared; and a configuration with a field the splice
// does not know is marshalled whole.
func TestRouteResourceIsProtoMarshal(t *testing.T) {
	s := buildSnap(t, filestore.NewStore(), incrementalBase())
	p := &Proxy{ID: "e", Kind: KindSidecar, Namespace: "ns-0"}
	g, err := generate(s, p, GroupKey(s, p))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, r := range g.types[resourcev3.RouteType].All() {
		rc := r.msg.(*routev3.RouteConfiguration)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.any.Value, want) {
			t.Errorf("route configuration %s: put-together bytes differ from proto.Marshal", name)
		}
		if len(rc.GetVirtualHosts()) < 2 {
			t.Errorf("route configuration %s: %d virtual hosts, want several", name, len(rc.GetVirtualHosts()))
		}
		// Shared: every virtual host's bytes from the part's cache.
		again, fresh, err := routeResource(rc, g.out.vhosts, map[*routev3.VirtualHost][]byte{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fresh) != 0 || !bytes.Equal(again.any.Value, want) || again.hash != r.hash {
			t.Errorf("route configuration %s: from shared virtual hosts: %d serialised anew, bytes equal %v", name, len(fresh), bytes.Equal(again.any.Value, want))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no route configuration")
	}
	rc := &routev3.RouteConfiguration{Name: "80", VirtualHosts: []*routev3.VirtualHost{{Name: "a", Domains: []string{"a"}}}, InternalOnlyHeaders: []string{"x-internal"}}
	r, _, err := routeResource(rc, nil, map[*routev3.VirtualHost][]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(rc); !bytes.Equal(r.any.Value, want) {
		t.Error("a route configuration with internal_only_headers: bytes differ from proto.Marshal")
	}
}
