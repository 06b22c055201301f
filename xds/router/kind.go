// Package router generates the config of vmesh's third proxy kind, the
// router: an Envoy in router mode serving Istio Gateway objects (Istio's
// ingress and egress gateways), with Istio's gateway layout. Its
// generators are pure: a model.View in, Envoy resources out. They read the
// Gateways that select the router (model.View.Gateways) and the
// VirtualServices bound to them, and reuse the sidecar's route and cluster
// translation (xds/sidecar, xds/translate).
package router

import (
	"fmt"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// NodeType is the first field of a router's node id,
// "router~IP~id~namespace.svc.cluster.local", as Istio's gateways have it.
const NodeType = "router"

// Kind is the router: its row in xds's table of proxy kinds
// (xds/kinds.go).
type Kind struct{}

// Name is the kind's name.
func (Kind) Name() model.ProxyKind { return model.KindRouter }

// Reads is what a router's generators read: the Gateways that select its
// labels and the VirtualServices bound to them (its group key names the
// Gateways), no Sidecar, any service with ports (Envoy resolves DNS
// itself), and its locality where locality load balancing applies (its
// EDS, as a sidecar's). Its IPs, workload name and other labels it does
// not read.
func (Kind) Reads() model.Reads { return model.Reads{Gateways: true, Locality: true} }

// Traits: a router's node id is "router~..."; it is an Envoy.
func (Kind) Traits() gen.Traits { return gen.Traits{NodeType: NodeType, Envoy: true} }

// Generators are the router's generators.
func (Kind) Generators() gen.Generators {
	return gen.Generators{Listeners: Listeners, Routes: Routes, Clusters: Clusters, Endpoints: Endpoints, Credentials: Credentials}
}

// Generate generates a router's group in full: LDS, RDS, CDS and EDS,
// checked for references that do not resolve.
func (Kind) Generate(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	r, err := sidecar.GenerateWith(model.NewView(s, w), Kind{}.Generators())
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", key, err)
	}
	byType := map[string]map[string]*gen.Resource{}
	put := func(t string, name string, m proto.Message) error {
		res, err := gen.NewResource(name, m)
		if err != nil {
			return err
		}
		if byType[t] == nil {
			byType[t] = map[string]*gen.Resource{}
		}
		byType[t][name] = res
		return nil
	}
	for _, m := range r.Listeners {
		if err := put(resourcev3.ListenerType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Routes {
		if err := put(resourcev3.RouteType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Clusters {
		if err := put(resourcev3.ClusterType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Endpoints {
		if err := put(resourcev3.EndpointType, m.GetClusterName(), m); err != nil {
			return nil, err
		}
	}
	types := make(map[string]*gen.ResourceMap, gen.NumTypes)
	for _, t := range gen.TypeURLs() {
		types[t] = cowmap.From(byType[t])
	}
	return gen.New(s, w, key, types), nil
}

// NewCache returns the router's part of a server cache: its groups are
// generated again at every push (gen.Regenerating), and the server sends
// only what changed.
func (k Kind) NewCache(gen.Env) gen.KindCache { return gen.Regenerating(k.Generate) }
